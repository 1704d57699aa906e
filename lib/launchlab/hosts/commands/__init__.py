"""Every shell command the kit runs on a host. One function builds each command; every value is shell-quoted.

These strings are the whole contract with a host's shell, so they are built here, in one place, and
unit-tested as strings (tests/test_commands.py). Transports only execute them; callers name them as
`commands.start_detached(…)`, whichever module of this package builds them:

    processes.py   detached starts, env files, process groups, signals, the kit's tagged processes
    files.py       folders: make (private), remove
    probes.py      questions to the host: clock, user, PATH, env, free port, HTTP from the host itself
    gpus.py        nvidia-smi: GPU list, the sampler, memory and compute-app snapshots (and the apps' runs)
    locks.py       the per-GPU lock files of locks.py
    provenance.py  host facts, the server interpreter's packages, installed-file integrity, environment
    patches.py     check, apply and revert a patch of the installed server package
    slurm.py       the slurm transport: job script, sbatch, squeue, scontrol, scancel, srun inside a job
                   (imported as `from launchlab.hosts.commands import slurm`)
"""

from launchlab.hosts.commands.files import NOT_YOURS, make_private_dir, own_folder, remove_tree
from launchlab.hosts.commands.gpus import (
    OWNERS_END,
    OWNERS_MARK,
    SMI_OUTPUT_BYTES,
    bounded_checked,
    gpu_apps,
    gpu_indices,
    gpu_owners,
    gpu_sampler,
    gpu_snapshot,
)
from launchlab.hosts.commands.locks import UNUSABLE as LOCK_UNUSABLE
from launchlab.hosts.commands.locks import lock_list, lock_release, lock_take, lock_take_over, lock_touch
from launchlab.hosts.commands.patches import patch_apply, patch_check, patch_revert
from launchlab.hosts.commands.probes import (
    answer,
    answer_of,
    env_value,
    free_port,
    host_clock,
    http_post,
    http_status,
    no_answer,
    user_id,
    which,
)
from launchlab.hosts.commands.processes import (
    TAGGED_END,
    env_file_text,
    find_launchlab_processes,
    find_tagged,
    group_alive,
    kill_group,
    process_group,
    signal_tagged,
    start_detached,
    wrapper_script,
)
from launchlab.hosts.commands.provenance import (
    SECTION_MARK,
    STEADY_SECTIONS,
    host_environment,
    host_facts,
    interpreter_facts,
    model_facts,
    package_integrity,
    server_python,
)

__all__ = [
    "OWNERS_END", "OWNERS_MARK", "SECTION_MARK", "STEADY_SECTIONS",
    "TAGGED_END", "answer", "env_file_text", "env_value", "find_launchlab_processes", "find_tagged", "free_port",
    "gpu_apps", "gpu_indices", "gpu_owners", "gpu_sampler",
    "gpu_snapshot", "group_alive", "host_clock", "host_environment", "host_facts", "http_post", "http_status",
    "answer_of", "no_answer",
    "interpreter_facts", "model_facts", "kill_group", "LOCK_UNUSABLE",
    "lock_list", "lock_release", "lock_take", "lock_take_over", "lock_touch",
    "NOT_YOURS", "SMI_OUTPUT_BYTES", "bounded_checked", "make_private_dir", "own_folder", "package_integrity",
    "patch_apply", "patch_check", "patch_revert", "process_group",
    "remove_tree", "server_python", "signal_tagged", "start_detached", "user_id", "which", "wrapper_script",
]
