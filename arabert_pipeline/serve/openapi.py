"""The OpenAPI 3.1 description of the service, served at /openapi.json.

Written out rather than generated: the request checks in requests.py are hand-written too (they reuse pipeline.core's),
and a test holds the two together (the fields of each schema are those requests.py accepts; the limits are the
server's own).
"""
from __future__ import annotations

from typing import Any

from ..version import __version__


def openapi(limits, decodings: tuple[str, ...], tasks=("classify", "tag"), collection: bool = False
            ) -> dict[str, Any]:
    """`tasks`: the text tasks served ("classify", "tag"); the routes of the others answer 404 and are not listed.
    `collection`: whether an index is served (/v1/ask; else it answers 404 and is not listed)."""
    text = {"type": "string", "minLength": 1, "description": "Must hold a letter or a digit; valid Unicode."}
    options = {
        "top_k": {"type": "integer", "minimum": 1, "maximum": limits.max_top_k, "default": 1,
                  "description": "Answers per question, best first."},
        "allow_no_answer": {"type": "boolean", "default": False,
                            "description": "Answer nothing ([]) where the model judges that the context does not "
                                           "hold the answer."},
        "decoding": {"enum": [None, *decodings], "default": None,
                     "description": "null: the model's own decoder; max-score: the most likely span; expected-f1: "
                                    "the span of highest expected F1."},
    }
    pair = {
        "question": {**text, "maxLength": limits.max_question_chars, "description": "Over maxLength: 413."},
        "context": {**text, "maxLength": limits.max_context_chars,
                    "description": "The passage that holds the answer; over maxLength: 413."},
    }
    texts = {"text": {**text, "maxLength": limits.max_context_chars, "description": "One text; over maxLength: 413."},
             "texts": {"type": "array", "minItems": 1, "maxItems": limits.max_pairs,
                       "items": {**text, "maxLength": limits.max_context_chars},
                       "description": "Many texts, answered in order; over maxItems: 413."}}
    error = {"$ref": "#/components/schemas/Error"}
    errors = {
        "400": {"description": "The body is not UTF-8 JSON, or the Host header does not name this server.",
                "content": {"application/json": {"schema": error}}},
        "403": {"description": "A request from another web page (Origin, Sec-Fetch-Site) than those the server "
                               "allows.", "content": {"application/json": {"schema": error}}},
        "408": {"description": "The body did not arrive in time.", "content": {"application/json": {"schema": error}}},
        "413": {"description": "The body, the question, the context or text, the number of pairs or texts, or "
                               "their work (a collection question's: its passages') is over the server's limit.",
                "content": {"application/json": {"schema": error}}},
        "415": {"description": "The Content-Type is not application/json.",
                "content": {"application/json": {"schema": error}}},
        "422": {"description": "A field is missing, of the wrong type or out of range; `field` names it.",
                "content": {"application/json": {"schema": error}}},
        "503": {"description": "The model is loading, the queue is full or the server is stopping: retry after "
                               "Retry-After seconds.",
                "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                "content": {"application/json": {"schema": error}}},
    }

    def post(summary: str, request: str, response: str) -> dict[str, Any]:
        return {"post": {
            "summary": summary,
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{request}"}}}},
            "responses": {"200": {"description": "The answers.", "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{response}"}}}}, **errors},
        }}

    task_paths = {
        "classify": ("/v1/classify", post("Label one text or many with the served classification model",
                                          "ClassifyRequest", "Classified")),
        "tag": ("/v1/tag", post("Find the named entities of one text or many with the served NER model", "TagRequest",
                                "Tagged")),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "arabert-pipeline answer service", "version": __version__,
                 "description": "Extractive question answering over Arabic text: each answer is a span of the given "
                                "context. Identical to Pipeline.answer for the same inputs. With its task models, "
                                "text classification (/v1/classify) and named entities (/v1/tag), as the task "
                                "pipelines answer. With an index, its collection asked (/v1/ask), as "
                                "Pipeline.answer(question, index=...) answers."},
        "paths": {
            "/v1/answer": post("Answer one question from its context", "AnswerRequest", "Answers"),
            "/v1/answer/batch": post("Answer many question-context pairs with the same options", "BatchRequest",
                                     "BatchAnswers"),
            **dict(task_paths[name] for name in tasks),
            **({"/v1/ask": post("Ask the collection the server was started with (serve --index): the question's "
                                "best passages are read and one answer chosen across them", "AskRequest",
                                "CollectionAnswers")} if collection else {}),
            "/health": {"get": {"summary": "Readiness: 200 once the model is loaded", "responses": {
                "200": {"description": "Ready.", "content": {"application/json": {"schema": {"type": "object"}}}},
                "503": {"description": "Loading, or the model failed to load."}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
                "200": {"description": "Text format 0.0.4.", "content": {"text/plain": {"schema": {"type": "string"}}}}
            }}},
            "/": {"get": {"summary": "A web page to ask questions in Arabic", "responses": {
                "200": {"description": "HTML.", "content": {"text/html": {"schema": {"type": "string"}}}}}}},
        },
        "components": {"schemas": {
            "AnswerRequest": {"type": "object", "additionalProperties": False, "required": ["question", "context"],
                              "properties": {**pair, **options}},
            "Pair": {"type": "object", "additionalProperties": False, "required": ["question", "context"],
                     "properties": pair},
            "BatchRequest": {"type": "object", "additionalProperties": False, "required": ["pairs"],
                             "properties": {"pairs": {"type": "array", "minItems": 1,
                                                      "maxItems": limits.max_pairs,
                                                      "items": {"$ref": "#/components/schemas/Pair"}},
                                            **options}},
            "Answer": {"type": "object", "required": ["text", "start", "end", "score"], "properties": {
                "text": {"type": "string", "description": "context[start:end]"},
                "start": {"type": "integer", "description": "Offset in code points of the context as sent."},
                "end": {"type": "integer"},
                "score": {"type": "number", "description": (
                    "The probability that the answer is right (SOQAL F1 >= 0.5 against a gold answer), for a model "
                    "with a calibration (the shipped one has one, fitted on dev questions); for a model without "
                    "one, the answer's probability among "
                    "the model's candidate spans for the question. In [0, 1]; never higher than the answer before "
                    "it in the list.")}}},
            "Answers": {"type": "object", "required": ["answers"], "properties": {
                "answers": {"type": "array", "items": {"$ref": "#/components/schemas/Answer"},
                            "description": "Up to top_k answers, best first; empty for no answer."}}},
            "AskRequest": {"type": "object", "additionalProperties": False, "required": ["question"],
                           "properties": {"question": pair["question"], **options}},
            "CollectionAnswer": {"type": "object", "required": [
                "text", "start", "end", "score", "document", "title", "passage"], "properties": {
                "text": {"type": "string", "description": "The document's text from start to end."},
                "start": {"type": "integer", "description": "Offset in code points of the document's text, as it was "
                                                            "indexed."},
                "end": {"type": "integer"},
                "score": {"type": "number", "description": "As an Answer's."},
                "document": {"type": "string", "description": "The document's id (given when the index was built; "
                                                              "by default its position)."},
                "title": {"type": ["string", "null"]},
                "passage": {"type": "object", "required": ["text", "start", "end"], "description": (
                    "The passage the answer was read from: text is the document's text from start to end (offsets "
                    "as the answer's), which holds the answer."), "properties": {
                    "text": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}}}}},
            "CollectionAnswers": {"type": "object", "required": ["answers"], "properties": {
                "answers": {"type": "array", "items": {"$ref": "#/components/schemas/CollectionAnswer"},
                            "description": "Up to top_k answers, best first; empty for no answer (allow_no_answer, "
                                           "or no passage sharing a term with the question)."}}},
            "BatchAnswers": {"type": "object", "required": ["results"], "properties": {
                "results": {"type": "array", "items": {"$ref": "#/components/schemas/Answers"},
                            "description": "One per pair, in order."}}},
            "ClassifyRequest": {"type": "object", "additionalProperties": False, "properties": {
                **texts, "top_k": {**options["top_k"], "description": "Labels per text, best first (at most the "
                                                                     "model's classes are returned)."}},
                "description": "Exactly one of text and texts."},
            "TagRequest": {"type": "object", "additionalProperties": False, "properties": texts,
                           "description": "Exactly one of text and texts."},
            "Label": {"type": "object", "required": ["label", "score"], "properties": {
                "label": {"type": "string"}, "score": {"type": "number", "description": "Its probability."}}},
            "Labels": {"type": "object", "required": ["labels"], "properties": {"labels": {
                "type": "array", "items": {"$ref": "#/components/schemas/Label"}}}},
            "Classified": {"oneOf": [{"$ref": "#/components/schemas/Labels"}, {
                "type": "object", "required": ["results"], "properties": {"results": {
                    "type": "array", "items": {"$ref": "#/components/schemas/Labels"},
                    "description": "One per text, in order."}}}],
                "description": "Labels for text; results for texts."},
            "Entity": {"type": "object", "required": ["entity_group", "score", "word", "start", "end"], "properties": {
                "entity_group": {"type": "string", "description": "Its type (PERS, LOC, ORG, MISC, ...)."},
                "score": {"type": "number", "description": "The mean probability of its words' tags."},
                "word": {"type": "string", "description": "text[start:end]: the text as sent."},
                "start": {"type": "integer", "description": "In code points of the text as sent."},
                "end": {"type": "integer"}}},
            "Entities": {"type": "object", "required": ["entities"], "properties": {"entities": {
                "type": "array", "items": {"$ref": "#/components/schemas/Entity"}}}},
            "Tagged": {"oneOf": [{"$ref": "#/components/schemas/Entities"}, {
                "type": "object", "required": ["results"], "properties": {"results": {
                    "type": "array", "items": {"$ref": "#/components/schemas/Entities"},
                    "description": "One per text, in order."}}}],
                "description": "Entities for text; results for texts."},
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["status", "message"], "properties": {
                    "status": {"type": "integer"},
                    "field": {"type": ["string", "null"], "description": 'The field at fault, e.g. "context" or '
                                                                         '"pairs[3].question".'},
                    "message": {"type": "string"}}}}},
        }},
    }
