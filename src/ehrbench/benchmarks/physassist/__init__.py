"""PhysAssistBench: four-turn physician sessions over FHIR-shaped tools with a simulated patient, graded per turn
by rubric (`benchmark.py`), and a MedAgentBench-style task set on the same FHIR layer (`medagent.py`)."""
