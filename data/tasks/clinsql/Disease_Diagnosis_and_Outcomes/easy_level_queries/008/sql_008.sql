SELECT
  APPROX_QUANTILES(DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0, 100)[OFFSET(50)] AS los_days_median
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
  ON p.subject_id = a.subject_id
JOIN `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
  ON a.hadm_id = d.hadm_id
WHERE p.gender = 'F'
  AND p.anchor_age BETWEEN 59 AND 69
  AND d.seq_num <= 3
  AND ((d.icd_version = 9 AND (d.icd_code LIKE '480%' OR d.icd_code LIKE '481%' OR d.icd_code LIKE '482%' OR d.icd_code LIKE '483%' OR d.icd_code LIKE '484%' OR d.icd_code LIKE '485%' OR d.icd_code LIKE '486%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'J12%' OR d.icd_code LIKE 'J13%' OR d.icd_code LIKE 'J14%' OR d.icd_code LIKE 'J15%' OR d.icd_code LIKE 'J16%' OR d.icd_code LIKE 'J17%' OR d.icd_code LIKE 'J18%')));
