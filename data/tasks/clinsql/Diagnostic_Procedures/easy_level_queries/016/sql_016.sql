SELECT
  APPROX_QUANTILES(procedure_count, 100)[OFFSET(90)] AS procedures_p90
FROM (
  SELECT
    pr.hadm_id,
    COUNT(DISTINCT pr.icd_code) AS procedure_count
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.procedures_icd` AS pr
    ON p.subject_id = pr.subject_id
  WHERE p.gender = 'F'
    AND p.anchor_age BETWEEN 76 AND 86
    AND ((pr.icd_version = 9 AND (pr.icd_code LIKE '35%' OR pr.icd_code LIKE '36%' OR pr.icd_code LIKE '37%')) OR (pr.icd_version = 10 AND (pr.icd_code LIKE '02%')))
  GROUP BY pr.hadm_id
) AS per_admission;
