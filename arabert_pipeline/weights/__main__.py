"""`python -m arabert_pipeline.weights`, the command of earlier versions: say where it went, rather than end doing
nothing."""
raise SystemExit("python -m arabert_pipeline.weights is now a verb: arabert-pipeline weights MODEL_DIR --plain OUT "
                 "(or --int8-rows)")
