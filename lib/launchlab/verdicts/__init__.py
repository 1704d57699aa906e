"""The analysis (layer 2): pure functions of the run directory's frames and records.

    frames        the run directory's raw files → runs / events / telemetry frames (the one reader of raw files here)
    runstatus     one run: its outcome, parsed logs and samples → its record's status and figures (conclude)
    analysis      many runs: valid observations, strata, each factor's decision (Fisher's exact test), effects
    confounds, derivedargs, levelchecks, gpustate, ordereffects
                  what else differed, what follows from the factors, whether each level took effect, other
                  processes' GPU memory, cold first runs
    budget, thresholds   memory budgets and break-evens (through the server kinds), a search's intervals
    verdict       all of the above → the typed Verdict and its prose
    question      the experiment's question answered from the verdict's effects, where they allow
"""
