"""EHRAgent's prompts, as its public code has them (data/prompts_*.py.txt, see data/SOURCE.md), and its initial
long-term memory, parsed from the 4-shot examples exactly as the original's main.py parses them (which leaves a
leading space on each question and solution; kept, since the examples reach the model that way)."""
from __future__ import annotations

import ast
import functools
from importlib import resources

FILES = {"ehrsql_mimic_iii": "prompts_mimic.py.txt", "ehrsql_eicu": "prompts_eicu.py.txt",
         "treqs": "prompts_treqs.py.txt"}
# The chatbot's system message and the two helper calls' (main.py, medagent.py)
CHATBOT_SYSTEM = ("For coding tasks, only use the functions you have been provided with. Reply TERMINATE when the task "
                  "is done. Save the answers to the questions in the variable 'answer'. Please only generate the code.")
KNOWLEDGE_SYSTEM = "You are an AI assistant that helps people find information."
DEBUGGER_SYSTEM = ("You are an AI assistant that helps people debug their code. Only list one most possible reason to "
                   "the errors.")
KNOWLEDGE_FALLBACK = "Fail to retrieve related knowledge, please try again later."
DEBUGGER_FALLBACK = "Fail to diagnose the reasons to the errors."
PYTHON_FUNCTION = {"name": "python", "description": "run the entire code and return the execution result. Only "
                   "generate the code.", "parameters": {"type": "object", "properties": {"cell": {
                       "type": "string", "description": "Valid Python code to execute."}}, "required": ["cell"]}}


@functools.lru_cache(maxsize=None)
def prompts(db_id: str) -> dict[str, str]:
    """The string constants of the database's prompt file (RetrKnowledge, EHRAgent_Message_Prompt, CodeDebugger,
    EHRAgent_4Shots_Knowledge)."""
    text = resources.files("ehrbench.benchmarks.ehragent").joinpath("data", FILES[db_id]).read_text()
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out[node.targets[0].id] = node.value.value
    return out


def initial_memory(db_id: str) -> list[dict]:
    """The four hand-written {question, knowledge, code} examples the memory starts from (main.py's parsing)."""
    memory = []
    for item in prompts(db_id)["EHRAgent_4Shots_Knowledge"].split("\n\n"):
        item = item.split("Question:")[-1]
        question = item.split("\nKnowledge:\n")[0]
        item = item.split("\nKnowledge:\n")[-1]
        memory.append({"question": question, "knowledge": item.split("\nSolution:")[0],
                       "code": item.split("\nSolution:")[-1]})
    return memory
