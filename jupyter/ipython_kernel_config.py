# The kernel's own configuration, installed by `make setup` into .venv/etc/ipython/ (IPython reads sys.prefix's
# etc/ipython for every kernel of that environment). papermill run by hand (the README's commands) starts kernels
# that announce "Kernel is running over TCP without encryption" on the terminal, before every notebook: a notice
# about a loopback connection the kit does not choose, which a user reads as an error. The kit's own kernels are
# started quieter still (runner/kernels.py). Errors of the kernel still show.
c.IPKernelApp.log_level = "ERROR"  # noqa: F821 (c: the config object IPython gives a config file)
