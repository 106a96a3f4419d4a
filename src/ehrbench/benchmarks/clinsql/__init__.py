"""ClinSQL (Shen et al.): patient-similarity cohort text-to-SQL over MIMIC-IV, graded by rubric trees. In progress
(issue 13): the dialect path from BigQuery to DuckDB."""
