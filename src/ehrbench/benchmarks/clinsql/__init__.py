"""ClinSQL (Shen et al., EACL 2026): patient-similarity cohort text-to-SQL over MIMIC-IV, graded by rubric trees.

tasks.py (the original's folder layout) -> agent.py (CoT, refinement on execution errors) -> tools.py (BigQuery SQL
through dialect.py into the guarded DuckDB) -> scoring.py (checker, SQL graders) -> rubric.py (aggregation);
benchmark.py puts them behind the seam; authoring.py and templates.py write the project's tasks from the world.
"""
