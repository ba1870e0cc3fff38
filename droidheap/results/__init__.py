"""What a person reads from a profile: loaded into one model (model.py) from an output directory,
a trace or a pprof (load.py), then ranked, compared and drawn (reports, diff, check, HTML)."""
