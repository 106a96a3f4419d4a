"""EHRAgent (Shi et al., 2024) on EHRSQL MIMIC-III, EHRSQL eICU and TREQS."""
