"""AgentEHR (Liao et al.): per-patient, time-censored clinical decision tasks over the MIMIC-IV rendering. In
progress (issue 14): per-patient databases (patient_db.py) and the censored view an episode sees (censoring.py)."""
