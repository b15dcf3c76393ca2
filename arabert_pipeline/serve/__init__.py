"""`arabert-pipeline serve`: `Pipeline.answer` as an HTTP service with dynamic batching, metrics and an Arabic web page
(app.py), on Starlette and uvicorn (cli.py). The last stage: it imports the pipeline, and nothing imports it."""
