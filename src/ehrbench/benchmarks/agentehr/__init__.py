"""AgentEHR (Liao et al.): per-patient, time-censored prediction of a patient's next clinical events.

patient_db.py (per-patient files) -> censoring.py (what an episode may see at t) -> tools.py (the 19 tools) ->
agent.py (ReAct, ReSum, RetroSum, reference) -> scoring.py (F1, Best@K, interaction errors); tasks.py and
authoring.py write the samples (CCS and ATC in data/), the MIMIC-III subset among them; memory.py is RetroSum's
evolving experience memory; benchmark.py puts them behind the seam, with the per-patient views in patient-routed
service shards.
"""
