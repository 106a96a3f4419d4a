"""AgentEHR (Liao et al.): per-patient, time-censored prediction of a patient's next clinical events.

patient_db.py (per-patient files) -> censoring.py (what an episode may see at t) -> tools.py (the 19 tools) ->
agent.py (ReAct, ReSum, RetroSum, reference) -> scoring.py (F1, Best@K, interaction errors); tasks.py and
authoring.py write the samples (CCS and ATC in data/); benchmark.py puts them behind the seam. In progress (issue
14): the MIMIC-III subset, the evolving memory and patient-routed shards are still to come.
"""
