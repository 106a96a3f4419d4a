"""MIMIC-IV* (EHR-ChatQA paper Table 12): the world's hospital-0 patients as the renamed MIMIC-IV demo.

Ids look like the demo's (patients 100xxxxx, admissions 2xxxxxxx, ICU stays 3xxxxxxx), values are lowercase,
times lie in the shifted year 2100. `dictionary="full"` lists every ICD-9-CM and ICD-10-CM diagnosis as the demo's
d_icd_diagnoses does; `"used"` lists only the codes some patient has (small and fast, for tests).
"""
from __future__ import annotations

from sqlalchemy import DOUBLE_PRECISION, Column, ForeignKey, ForeignKeyConstraint, MetaData, Table, Text

from ..world.generator import WorldSize
from ..world.model import Patient
from ..world.vocab import icd_diagnoses, vocabulary
from .ids import seeded_amount
from .writer import INT, Ids, Rows, fmt_time

DB_ID = "mimic_iv_star"


def _pk() -> Column:
    return Column("recordid", INT, primary_key=True, autoincrement=False)


def metadata() -> MetaData:
    """Every table and column as the authors' `mimic_iv_star.sql` declares it (types, NOT NULL, keys, in its
    order): `column_search` prints these declarations to the agent."""
    md = MetaData()
    I, T, D = INT, Text, DOUBLE_PRECISION
    adm = lambda: Column("admissionid", I, ForeignKey("hospitaladmissions.admissionid"), nullable=False)  # noqa: E731
    pid = lambda: Column("patientid", I, nullable=False)  # noqa: E731
    icu = lambda: Column("icuadmissionid", I, ForeignKey("icuepisodes.icuadmissionid"), nullable=False)  # noqa: E731
    item = lambda: Column("itemcode", I, ForeignKey("clinicalitemtypes.itemcode"), nullable=False)  # noqa: E731
    Table("demographics", md, _pk(), Column("patientid", I, nullable=False), Column("gender", T, nullable=False),
          Column("dateofbirth", T, nullable=False), Column("dateofdeath", T))
    Table("hospitaladmissions", md, _pk(), Column("patientid", I, ForeignKey("demographics.patientid"), nullable=False),
          Column("admissionid", I, nullable=False), Column("admitdatetime", T, nullable=False),
          Column("dischargedatetime", T), Column("admissiontype", T, nullable=False),
          Column("admitsource", T, nullable=False), Column("dischargedestination", T),
          Column("insurancetype", T, nullable=False), Column("language", T), Column("maritalstatus", T),
          Column("age", I, nullable=False))
    for name in ("diagnosiscodes", "procedurecodes"):
        Table(name, md, _pk(), Column("icdcode", T, nullable=False), Column("codeversion", I, nullable=False),
              Column("description", T, nullable=False))
    Table("labtesttypes", md, _pk(), Column("itemcode", I, nullable=False), Column("itemname", T))
    Table("clinicalitemtypes", md, _pk(), Column("itemcode", I, nullable=False), Column("itemname", T, nullable=False),
          Column("abbreviation", T, nullable=False), Column("itemtype", T, nullable=False))
    for name, codes in (("admissiondiagnoses", "diagnosiscodes"), ("admissionprocedures", "procedurecodes")):
        Table(name, md, _pk(), pid(), Column("admissionid", I, nullable=False), Column("icdcode", T, nullable=False),
              Column("codeversion", I, nullable=False), Column("recordeddatetime", T, nullable=False),
              # table-level, both: SQLAlchemy writes a column's own key after every table-level one
              ForeignKeyConstraint(["admissionid"], ["hospitaladmissions.admissionid"]),
              ForeignKeyConstraint(["codeversion", "icdcode"], [f"{codes}.codeversion", f"{codes}.icdcode"]))
    Table("labresults", md, _pk(), pid(), adm(), Column("itemcode", I, ForeignKey("labtesttypes.itemcode"), nullable=False),
          Column("resultdatetime", T), Column("resultvalue", D), Column("resultunit", T))
    Table("medicationorders", md, _pk(), pid(), adm(), Column("startdatetime", T, nullable=False),
          Column("enddatetime", T), Column("medicationname", T, nullable=False), Column("dosevalue", T, nullable=False),
          Column("doseunit", T, nullable=False), Column("administrationroute", T, nullable=False))
    Table("costrecords", md, _pk(), pid(), adm(), Column("eventtype", T, nullable=False),
          Column("costid", I, *(ForeignKey(f"{t}.recordid") for t in ("admissiondiagnoses", "admissionprocedures",
                                                                       "labresults", "medicationorders")),
                 nullable=False),
          Column("costdatetime", T, nullable=False), Column("costamount", D, nullable=False))
    Table("clinicalevents", md, _pk(), pid(), adm(), icu(), item(), Column("recordeddatetime", T, nullable=False),
          Column("value", D), Column("unit", T))
    Table("intakerecords", md, _pk(), pid(), adm(), icu(), Column("startdatetime", T, nullable=False), item(),
          Column("totalvolume", D), Column("volumeunit", T))
    Table("outputrecords", md, _pk(), pid(), adm(), icu(), Column("recordeddatetime", T, nullable=False), item(),
          Column("volume", D), Column("volumeunit", T))
    Table("microbiologyresults", md, _pk(), pid(), adm(), Column("collecteddatetime", T, nullable=False),
          Column("specimentype", T), Column("testname", T), Column("organismname", T))
    Table("icuepisodes", md, _pk(), pid(), adm(), Column("icuadmissionid", I, nullable=False),
          Column("initialcareunit", T, nullable=False), Column("finalcareunit", T, nullable=False),
          Column("admitdatetime", T, nullable=False), Column("dischargedatetime", T))
    Table("patienttransfers", md, _pk(), pid(), adm(), Column("transferid", I, nullable=False),
          Column("transfertype", T, nullable=False), Column("careunit", T),
          Column("transferindatetime", T, nullable=False), Column("transferoutdatetime", T))
    return md


def _dose_text(dose: float) -> str:
    return repr(float(dose))


# Demo-like id pools: label -> (low, high, how many the world draws given what all its patients took).
ID_POOLS = {
    "mimic/patients": (10_000_000, 10_050_000, lambda taken: taken["mimic/patients"]),
    "mimic/admissions": (20_000_000, 30_000_000, lambda taken: taken["mimic/admissions"]),
    "mimic/icustays": (30_000_000, 40_000_000, lambda taken: taken["mimic/icustays"]),
    "mimic/transfers": (30_000_000, 40_000_000, lambda taken: taken["mimic/admissions"] * 6 + 10),
}


def patient_range(size: WorldSize) -> tuple[int, int]:
    """The world's patient indices this database renders: the MIMIC site's."""
    return 0, size.n_mimic


def render_shared(seed: int, size: WorldSize, dictionary: str, used: set, rows: Rows) -> None:
    """The dictionaries: every ICD code (`full`, as the demo) or only the diagnosis codes some patient has."""
    v = vocabulary()
    add = rows.add
    for version in (9, 10):
        table = icd_diagnoses(version)
        codes = sorted(table) if dictionary == "full" else sorted(c for c, ver in used if ver == version)
        for code in codes:
            add("diagnosiscodes", icdcode=code.lower(), codeversion=version, description=table[code])
    proc_codes = {}
    for proc in v.all_procedures.values():          # a tail code sharing a curated code's target keeps its title
        proc_codes.setdefault((proc.icd9[0].lower(), 9), proc.icd9[1])
        proc_codes.setdefault((proc.icd10[0].lower(), 10), proc.icd10[1])
    for code, version, title in v.extra_procedure_codes:
        proc_codes[(code.lower(), version)] = title
    for (code, version), title in sorted(proc_codes.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        add("procedurecodes", icdcode=code, codeversion=version, description=title)
    for lab in sorted(v.all_labs.values(), key=lambda x: x["mimic_id"]):
        add("labtesttypes", itemcode=lab["mimic_id"], itemname=lab["mimic"])
    for group, itemtype in ((v.vitals, "clinicalevents"), (v.inputs, "intakerecords"), (v.outputs, "outputrecords")):
        for item in sorted(group.values(), key=lambda x: x["mimic_id"]):
            add("clinicalitemtypes", itemcode=item["mimic_id"], itemname=item["mimic"],
                abbreviation=item["abbreviation"], itemtype=itemtype)


def render_patients(patients: list[Patient], seed: int, rows: Rows, ids: Ids) -> set:
    """A chunk of patients' rows; returns the (ICD code, version) pairs of their diagnoses, for the dictionary."""
    v = vocabulary()
    add = rows.add
    used = {(v.all_conditions[d.key].icd9 if a.icd_version == 9 else v.all_conditions[d.key].icd10, a.icd_version)
            for p in patients for a in p.admissions for d in a.diagnoses}
    # patients ----------------------------------------------------------------------------------------------------
    for p in patients:
        pid = ids.next("mimic/patients")
        add("demographics", patientid=pid, gender=p.gender, dateofbirth=fmt_time(p.dob), dateofdeath=fmt_time(p.dod))
        for a in p.admissions:
            hadm = ids.next("mimic/admissions")
            add("hospitaladmissions", patientid=pid, admissionid=hadm, admitdatetime=fmt_time(a.admit),
                dischargedatetime=fmt_time(a.discharge), admissiontype=a.admission_type, admitsource=a.admit_source,
                dischargedestination=a.discharge_destination, insurancetype=a.insurance, language=a.language,
                maritalstatus=a.marital, age=a.age)
            base = {"patientid": pid, "admissionid": hadm}
            for d in a.diagnoses:
                cond = v.all_conditions[d.key]
                code = (cond.icd9 if a.icd_version == 9 else cond.icd10).lower()
                r = add("admissiondiagnoses", **base, icdcode=code, codeversion=a.icd_version,
                        recordeddatetime=fmt_time(d.time))
                add("costrecords", **base, eventtype="admissiondiagnoses", costid=r, costdatetime=fmt_time(d.time),
                    costamount=seeded_amount(seed, "dx", r, 25.0))
            for e in a.procedures:
                proc = v.all_procedures[e.key]
                code = (proc.icd9 if a.icd_version == 9 else proc.icd10)[0].lower()
                r = add("admissionprocedures", **base, icdcode=code, codeversion=a.icd_version,
                        recordeddatetime=fmt_time(e.time))
                add("costrecords", **base, eventtype="admissionprocedures", costid=r, costdatetime=fmt_time(e.time),
                    costamount=seeded_amount(seed, "px", r, proc.cost))
            for e in a.labs:
                spec = v.all_labs[e.lab]
                r = add("labresults", **base, itemcode=spec["mimic_id"], resultdatetime=fmt_time(e.time),
                        resultvalue=e.value, resultunit=spec["unit"] or None)
                add("costrecords", **base, eventtype="labresults", costid=r, costdatetime=fmt_time(e.time),
                    costamount=seeded_amount(seed, "lab", r, 12.0))
            for m in a.medications:
                drug = v.all_drugs[m.drug]
                r = add("medicationorders", **base, startdatetime=fmt_time(m.start), enddatetime=fmt_time(m.end),
                        medicationname=drug.name, dosevalue=_dose_text(m.dose), doseunit=drug.unit,
                        administrationroute=drug.route)
                add("costrecords", **base, eventtype="medicationorders", costid=r, costdatetime=fmt_time(m.start),
                    costamount=seeded_amount(seed, "rx", r, 8.0))
            for mi in a.micro:
                spec = v.micro[mi.kind]
                add("microbiologyresults", **base, collecteddatetime=fmt_time(mi.time),
                    specimentype=spec["mimic_specimen"], testname=spec["mimic_test"], organismname=mi.organism)
            moves: list[tuple[str, str, object, object]] = []
            for unit, tin, tout in a.wards[:1] if a.wards and a.wards[0][0] == "emergency department" else []:
                moves.append(("ed", unit, tin, tout))
            for stay in a.icu_stays:
                sid = ids.next("mimic/icustays")
                add("icuepisodes", **base, icuadmissionid=sid, initialcareunit=stay.first_unit,
                    finalcareunit=stay.last_unit, admitdatetime=fmt_time(stay.intime),
                    dischargedatetime=fmt_time(stay.outtime))
                icu = {**base, "icuadmissionid": sid}
                for e in stay.vitals:
                    spec = v.vitals[e.vital]
                    add("clinicalevents", **icu, itemcode=spec["mimic_id"], recordeddatetime=fmt_time(e.time),
                        value=e.value, unit=spec["unit"])
                for f in stay.fluids:
                    if f.direction == "intake":
                        spec = v.inputs[f.item]
                        add("intakerecords", **icu, startdatetime=fmt_time(f.time), itemcode=spec["mimic_id"],
                            totalvolume=f.amount, volumeunit=spec["unit"])
                    else:
                        spec = v.outputs[f.item]
                        add("outputrecords", **icu, recordeddatetime=fmt_time(f.time), itemcode=spec["mimic_id"],
                            volume=f.amount, volumeunit=spec["unit"])
                moves.append(("admit" if not moves else "transfer", stay.first_unit, stay.intime, stay.outtime))
            for unit, tin, tout in a.wards:
                if unit != "emergency department":
                    moves.append(("admit" if not moves else "transfer", unit, tin, tout))
            if a.discharge is not None:                  # a patient still in the hospital has no discharge yet
                moves.append(("discharge", None, a.discharge, None))
            for kind, unit, tin, tout in moves:
                add("patienttransfers", **base, transferid=ids.next("mimic/transfers"), transfertype=kind, careunit=unit,
                    transferindatetime=fmt_time(tin), transferoutdatetime=fmt_time(tout))
    return used
