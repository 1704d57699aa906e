"""The simulated GPU host: real processes with simulated GPU memory, so the kit runs on any laptop.

Everything here is labelled as simulated where a user can see it (GPU names, log banner, report).
Modules import only the standard library: they start as short-lived processes many times a second.
"""
