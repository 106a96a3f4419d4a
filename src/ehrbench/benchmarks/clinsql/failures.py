"""How a failed model turn ends in ClinSQL, as its original ends it (Barryshen1/ClinSQL 337f783f: the inference
scripts and the rubric scorer)."""
from __future__ import annotations

from ...failures import FailureTable, Row

TABLE = FailureTable((
    Row(("agent",), ("empty",), "\"Failed to generate SQL\": no SQL, the sample judged",
        "an HTTP 200 without choices is retried, then the trial re-run"),
    Row(("agent",), ("cut_with_text",), "the text as it came: its last SQL block (or statement) is extracted"),
    Row(("agent",), ("cut_off", "blocked", "refused_for_size", "bad_request"),
        "counted as a failed generation, and the sample still judged, as one without SQL (a refinement that fails "
        "leaves the last query executed as the candidate)"),
    Row(("grader",), ("cut_off", "blocked"), "read as the empty reply: no \"1\" in it, 0 (the released scorer "
                                             "crashes on a `None`)"),
    Row(("grader",), ("refused_for_size", "bad_request"), "\"Evaluation failed\": the leaf scores 0, as the "
                                                          "published runs' did"),
    Row(("grader",), ("cut_with_text",), "the text as it came, read as any verdict (a \"1\" anywhere passes)"),
), note="Rate limits, server errors and timeouts: the original's clients retry (OpenAI's SDK twice, Gemini's three "
        "times), then count a failed generation or a failed leaf; ehrbench retries with backoff, then re-runs the "
        "trial as infrastructure.")
