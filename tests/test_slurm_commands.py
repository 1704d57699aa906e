"""The slurm transport's shell commands, as strings (tests/test_slurm.py runs them against a real Slurm)."""

from __future__ import annotations

import shlex

import pytest

from launchlab.hosts.commands import slurm as cmd


def test_sbatch_submits_parsable_with_the_run_id_in_name_and_comment_and_quotes_every_value():
    line = cmd.sbatch("/shared/w/r 1/job.sh", run_id="01_a_rep1", batch="b0", folder="/shared/w/r 1",
                      partition="gpu", time="00:30:00", gres="gpu:8", account="proj", nodes=1,
                      extra=["--constraint=h100 a100", "--qos=high"], nodelist="node7")
    argv = shlex.split(line)
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--job-name=launchlab:01_a_rep1" in argv and "--comment=launchlab:01_a_rep1@b0" in argv
    assert "--chdir=/shared/w/r 1" in argv and "--output=/shared/w/r 1/job.out" in argv
    assert {"--partition=gpu", "--time=00:30:00", "--gres=gpu:8", "--account=proj", "--nodelist=node7",
            "--constraint=h100 a100", "--qos=high"} <= set(argv)
    assert "--no-requeue" in argv  # one run, one attempt
    assert argv[-1] == "/shared/w/r 1/job.sh" and "--hold" not in argv and "--test-only" not in argv


def test_sbatch_test_only_asks_without_submitting_and_hold_submits_held():
    ask = shlex.split(cmd.sbatch("j.sh", run_id="r", batch="-", folder="/f", partition="gpu", time="1", gres=None,
                                 account=None, nodes=1, test_only=True))
    assert ask[:2] == ["sbatch", "--test-only"] and "--parsable" not in ask and not any("gres" in a for a in ask)
    held = shlex.split(cmd.sbatch("j.sh", run_id="r", batch="-", folder="/f", partition="gpu", time="1", gres=None,
                                  account=None, nodes=1, hold=True))
    assert "--hold" in held


def test_stop_is_scancel_with_term_to_the_steps_then_plain_scancel():
    assert cmd.cancel(42, "TERM") == "scancel --signal=TERM 42"
    assert cmd.cancel(42) == "scancel 42"
    with pytest.raises(ValueError):
        cmd.cancel(42, "TERM; rm -rf /")


def test_state_details_and_in_job_commands_take_only_a_job_number():
    assert cmd.job_state(7) == "squeue -h -t all -j 7 -o '%T %r %N'"
    assert cmd.job_details(7) == "scontrol show job -o 7"
    assert cmd.release(7) == "scontrol release 7"
    with pytest.raises(ValueError):
        cmd.job_state("7; true")
    inner = shlex.split(cmd.in_job(7, "curl -s 'http://x/health'"))
    assert inner[:3] == ["srun", "--jobid=7", "--overlap"] and inner[-1] == "curl -s 'http://x/health'"


def test_the_job_script_records_its_facts_runs_sampler_and_server_and_passes_term_on():
    script = cmd.job_script("/shared/w/run 1", env={"PATH": "/box/bin:/usr/bin", "LAUNCHLAB_SIM_STATE": "/box it"})
    assert script.startswith("#!/bin/bash\n")
    assert "cd '/shared/w/run 1' || exit 1" in script
    assert "export LAUNCHLAB_SIM_STATE='/box it'" in script
    assert "srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --kill-on-bad-exit=1 bash ./server.sh &" in script
    assert "trap 'kill -TERM \"$server\" 2>/dev/null' TERM" in script
    assert f"> {cmd.SERVER_EXIT_FILE}" in script and f"> {cmd.FACTS_FILE}" in script
    with pytest.raises(ValueError):
        cmd.job_script("/f", env={"BAD NAME": "x"})


def test_the_launch_script_sources_the_env_file_and_execs_the_quoted_argv_into_its_log():
    script = cmd.launch_script(["python3", "-m", "srv", "--x", "a b;c"], env_file="server.env", log_name="server.log")
    assert "set -a; . ./server.env; set +a" in script
    assert "exec python3 -m srv --x 'a b;c' > server.log 2>&1 < /dev/null" in script


def test_the_listing_of_kit_jobs_ends_with_the_end_marker():
    assert cmd.my_jobs().endswith("&& echo '# end of the list'")


def test_a_slurm_host_entry_refuses_what_the_kit_sets_itself_and_a_simulated_box_on_a_remote_login(tmp_path):
    from launchlab.hosts.slurm_spec import SlurmSpec

    ok = SlurmSpec(transport="slurm", partition="gpu", gres="gpu:8", max_jobs=2, simulate={"gpus": 8})
    assert ok.simulated and ok.worker_slots() == [None, None] and ok.pin_node
    for bad in ({"sbatch_args": ["--output=/tmp/x"]}, {"login": "head", "simulate": {}}, {"gres": "gpu:8; rm"},
                {"time": "half an hour"}, {"partition": "-x"}):
        with pytest.raises(ValueError):
            SlurmSpec(**{"transport": "slurm", "partition": "gpu", **bad})


def test_a_simulated_job_sees_its_gpus_numbered_from_zero_before_the_env_file(tmp_path):
    import subprocess

    (tmp_path / "server.env").write_text("X=1\n")
    script = cmd.launch_script(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], env_file="server.env", log_name="log",
                               renumber_gpus=True)
    assert script.index(cmd.RENUMBER_GPUS) < script.index(". ./server.env")
    (tmp_path / "run.sh").write_text(script)
    subprocess.run(["bash", "run.sh"], cwd=tmp_path, check=True,
                   env={"PATH": "/usr/bin:/bin", "SLURM_JOB_GPUS": "8,9,10", "CUDA_VISIBLE_DEVICES": "8,9,10"})
    assert (tmp_path / "log").read_text() == "0,1,2\n"
    assert cmd.RENUMBER_GPUS not in cmd.launch_script(["x"], env_file=None, log_name="log")


def test_a_slurm_host_with_an_ssh_login_node_opens_without_connecting_and_runs_its_commands_over_ssh(sim_root):
    from launchlab.hosts import slurm, ssh
    from launchlab.hosts.slurm_spec import SlurmSpec

    host = slurm.open_host("cl", SlurmSpec(transport="slurm", login="login-node", partition="gpu"))
    assert isinstance(host.login, ssh.SshHost) and host.login.spec.address == "login-node"
    assert host.login._conn is None and not host.simulated
    # its processes are jobs on a node Slurm picks, which the kit's commands do not reach (was `not host.runs_here`)
    assert host.run_on_gpu_node("nvidia-smi -L") is None and host.facts_before_start() == {}
    assert host.login._conn is None
    assert host.workdir == ".launchlab/work"
    host.close()


def test_sacct_is_asked_for_the_allocation_alone_parsable_and_without_a_header():
    argv = shlex.split(cmd.job_accounting(4242))
    assert argv[:5] == ["sacct", "-X", "-n", "-P", "-j"] and argv[5] == "4242"
    assert argv[-1] == "JobID,JobName,Partition,State,ExitCode,NodeList,Start,End,Elapsed,AllocTRES"
    with pytest.raises(ValueError):
        cmd.job_accounting("4242; true")


# lines in the form sacct -X -n -P prints them (Slurm's sacct(1): `|`-separated, no trailing `|`; State
# `CANCELLED by <uid>`; a job that never ran has NodeList `None assigned` and Start `None`; ExitCode `code:signal`)
SACCT_LINES = {
    "completed": "4242|launchlab:01_a_rep1|gpu|COMPLETED|0:0|gpu-node-17|2026-11-30T10:00:00|2026-11-30T10:03:12|"
                 "00:03:12|billing=8,cpu=8,gres/gpu=8,mem=64G,node=1",
    "cancelled by a user": "4243|launchlab:02_b_rep1|gpu|CANCELLED by 1000|0:15|gpu-node-17|2026-11-30T10:00:05|"
                           "2026-11-30T10:01:00|00:00:55|billing=8,cpu=8,gres/gpu=8,node=1",
    "cancelled while pending": "4244|launchlab:03_c_rep1|gpu|CANCELLED by 0|0:0|None assigned|None|"
                               "2026-11-30T10:02:00|00:00:00|",
    "timeout on two nodes": "4245|launchlab:04_d_rep1|gpu|TIMEOUT|0:0|gpu-node-[17-18]|2026-11-30T10:00:00|"
                            "2026-11-30T10:30:00|00:30:00|billing=16,cpu=16,gres/gpu=16,node=2",
    "preempted": "4246|launchlab:05_e_rep1|low|PREEMPTED|0:15|gpu-node-3|2026-11-30T10:00:00|2026-11-30T10:04:00|"
                 "00:04:00|cpu=1,gres/gpu=8,node=1",
    "a | in the job name": "4247|my|job|gpu|NODE_FAIL|1:0|gpu-node-9|2026-11-30T10:00:00|2026-11-30T10:04:00|"
                           "00:04:00|cpu=1,node=1",
}


def test_sacct_lines_read_as_scontrols_names_with_the_cancelling_uid_apart_and_missing_fields_left_out():
    done = cmd.parse_accounting(SACCT_LINES["completed"], 4242)
    assert done == {"JobId": "4242", "JobName": "launchlab:01_a_rep1", "Partition": "gpu", "JobState": "COMPLETED",
                    "ExitCode": "0:0", "NodeList": "gpu-node-17", "StartTime": "2026-11-30T10:00:00",
                    "EndTime": "2026-11-30T10:03:12", "RunTime": "00:03:12",
                    "TRES": "billing=8,cpu=8,gres/gpu=8,mem=64G,node=1"}
    cancelled = cmd.parse_accounting(SACCT_LINES["cancelled by a user"], 4243)
    assert (cancelled["JobState"], cancelled["CancelledBy"], cancelled["ExitCode"]) == ("CANCELLED", "1000", "0:15")
    never_ran = cmd.parse_accounting(SACCT_LINES["cancelled while pending"], 4244)
    assert never_ran["JobState"] == "CANCELLED" and "NodeList" not in never_ran and "StartTime" not in never_ran
    assert "TRES" not in never_ran and never_ran["EndTime"] == "2026-11-30T10:02:00"
    assert cmd.parse_accounting(SACCT_LINES["timeout on two nodes"], 4245)["NodeList"] == "gpu-node-[17-18]"
    assert cmd.parse_accounting(SACCT_LINES["preempted"], 4246)["JobState"] == "PREEMPTED"
    odd = cmd.parse_accounting(SACCT_LINES["a | in the job name"], 4247)
    assert (odd["JobName"], odd["Partition"], odd["JobState"]) == ("my|job", "gpu", "NODE_FAIL")


def test_sacct_output_without_the_jobs_line_reads_as_nothing_known():
    everything = "\n".join(SACCT_LINES.values())
    assert cmd.parse_accounting(everything, 4245)["JobState"] == "TIMEOUT"  # its own line among others
    assert cmd.parse_accounting(everything, 424) is None  # a prefix of a job id is another job
    assert cmd.parse_accounting("", 4242) is None
    assert cmd.parse_accounting("4242|short|line", 4242) is None
    assert cmd.parse_accounting(SACCT_LINES["completed"].replace("4242|", "4242_1|", 1), 4242) is None  # an array task


@pytest.mark.slow
def test_the_job_runs_the_provenance_commands_on_its_node_before_its_server_and_keeps_what_each_printed(tmp_path):
    import subprocess

    script = cmd.node_facts_script({"host_facts": "echo here; echo oops >&2", "host_env": "exit 3",
                                    "integrity": "sleep 30"}, {"integrity": 1})
    (tmp_path / "node-facts.sh").write_text(script)
    subprocess.run(["bash", "node-facts.sh"], cwd=tmp_path, check=True, timeout=20)
    read = {p.name: p.read_text() for p in tmp_path.glob("node-facts.*.*")}
    assert read == {"node-facts.host_facts.out": "here\n", "node-facts.host_facts.err": "oops\n",
                    "node-facts.host_facts.rc": "0\n", "node-facts.host_env.out": "", "node-facts.host_env.err": "",
                    "node-facts.host_env.rc": "3\n", "node-facts.integrity.out": "", "node-facts.integrity.err": "",
                    "node-facts.integrity.rc": "124\n"}  # a command that hangs is cut off at its timeout
    job = cmd.job_script("/f")
    assert job.index("bash ./node-facts.sh") < job.index("echo done > node-facts.done") < job.index("srun ")
    with pytest.raises(ValueError):
        cmd.node_facts_script({"x; rm": "true"})


def test_each_task_fills_its_rank_the_node_count_and_the_first_node_into_argv_and_env_values(tmp_path):
    import subprocess

    m = cmd.TASK_VALUES
    (tmp_path / "server.env").write_text(f"WHO='{m['node_rank']}/{m['nnodes']}@{m['master_addr']}'\nPLAIN='a&b $x'\n")
    argv = ["sh", "-c", 'echo "$1 $2 [$WHO] [$PLAIN]"', "-", f"--node-rank={m['node_rank']}",
            f"{m['master_addr']}:5000&{m['nnodes']}"]
    script = cmd.launch_script(argv, env_file="server.env", log_name="server.log", per_task=True,
                               rank_logs=["server.log", "server.node1.log"])
    (tmp_path / "run.sh").write_text(script)
    for rank in (0, 1):  # scontrol turns the node list into host names; with none, the task's own node is used
        subprocess.run(["bash", "run.sh"], cwd=tmp_path, check=True,
                       env={"PATH": "/usr/bin:/bin", "SLURM_NODEID": str(rank), "SLURM_JOB_NUM_NODES": "2",
                            "SLURMD_NODENAME": "gpu-a"})
    assert (tmp_path / "server.log").read_text() == "--node-rank=0 gpu-a:5000&2 [0/2@gpu-a] [a&b $x]\n"
    assert (tmp_path / "server.node1.log").read_text() == "--node-rank=1 gpu-a:5000&2 [1/2@gpu-a] [a&b $x]\n"
    assert "@@LAUNCHLAB_" not in cmd.launch_script(["x"], env_file=None, log_name="log")  # the sampler: as is


def test_sbatch_args_are_options_of_an_allow_list_matched_exactly():
    """Issue 50: a deny-list of prefixes let through what sbatch reads as the options the kit sets: short options
    (`-J x`, `-o /tmp/x`, `-D /`) and abbreviations (`--job=x`, `--out=/tmp/x`, `--chd=/`, `--wr=id`), and a bare
    word sbatch takes for the job script."""
    from launchlab.hosts.slurm_spec import SlurmSpec

    ok = SlurmSpec(transport="slurm", partition="gpu", sbatch_args=["--qos=high", "--exclusive", "--mem=0",
                                                                    "--constraint=h100|a100"])
    assert ok.sbatch_args[0] == "--qos=high"
    for bad in (["-J", "x"], ["-Jx"], ["-o", "/tmp/x"], ["-D/"], ["--job=x"], ["--out=/tmp/x"], ["--chd=/"],
                ["--wr=id"], ["--wrap=id"], ["--export=NONE"], ["--uid=0"], ["--array=1-100"], ["--qo=high"],
                ["--qos", "high"], ["--mem"], ["--contiguous=yes"], ["script.sh"], ["--parsable"], ["--output=/tmp/x"]):
        with pytest.raises(ValueError, match=r"sbatch_args\[\d\]"):
            SlurmSpec(transport="slurm", partition="gpu", sbatch_args=bad)
