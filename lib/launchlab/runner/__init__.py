"""What the CLI, papermill and the notebooks call (layer 5): the plan, the batch and its search, the run
notebook's side (runview), the kernels the batch forks, `launchlab import`."""
