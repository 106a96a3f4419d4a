"""AgentEHR (Liao et al.): per-patient, time-censored clinical decision tasks over the MIMIC-IV rendering. In
progress (issue 14): per-patient databases (patient_db.py), the censored view an episode sees (censoring.py), and
samples and candidate tables by the original's label rules (tasks.py, CCS in data/ccs.yaml)."""
