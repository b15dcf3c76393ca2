"""Evaluation: SOQAL-compatible and Arabic-correct EM / F1 / Sentence-Match, bootstrap CIs, side-by-side reports."""
