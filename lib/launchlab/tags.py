"""The environment variables the kit tags its processes with, so that they can be found again on a host whatever
became of the kernel that started them: the run a process belongs to and the batch that launched the run. Every
server, sampler and job the kit starts carries both (hosts' commands set them; the reaper, the drain, the GPU
state and leftovers read them back from /proc/PID/environ or the scheduler's job names)."""

RUN_ID_ENV = "LAUNCHLAB_RUN_ID"  # the run's tag: <batch folder>/<run id> (nodes.run_tag)
BATCH_ENV = "LAUNCHLAB_BATCH"  # the batch's id (locks.Owner.batch): a live lock naming it means the batch is alive
