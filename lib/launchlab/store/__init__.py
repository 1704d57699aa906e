"""The store: the run directory's paths and records (a planned run, its record, the manifest, the verdict's
typed record), the workspace's templates, what a run keeps of a server log. Layer 1: pure, cheap to import."""
