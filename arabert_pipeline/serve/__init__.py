"""`arabert-pipeline serve`: `Pipeline.answer` as an HTTP service with dynamic batching, metrics and an Arabic web page
(app.py: the routes; requests.py, admission.py, batcher.py, answerers.py: a request's way through), on Starlette and
uvicorn (cli.py). The last stage: it imports the pipeline, and nothing imports it."""
