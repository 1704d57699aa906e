"""One run (layer 4): its named steps (lifecycle), watching it (watch), cleaning up (cleanup), and the runs
the kit lost (recovery)."""
