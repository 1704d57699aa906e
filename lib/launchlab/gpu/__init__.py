"""nvidia-smi's outputs read: the sampler's and snapshots' CSV (telemetry) and the human-readable tables
(smitext). Layer 1."""
