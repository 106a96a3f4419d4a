"""Reading a judge's JSON out of free model text."""
from __future__ import annotations

import json
import re


def parse_json_object(text: str | None) -> dict | None:
    """The outermost {...} of `text` as a dict, or None (never eval)."""
    match = re.search(r"\{.*\}", text or "", re.S)
    if not match:
        return None
    try:
        value = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
