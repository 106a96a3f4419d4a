"""What a session's simulated patient knows and how they say it: facts derived from the record and the persona,
and a verifier that reads every answer back against the record.

The original builds a patient health model per patient (`phm/`: diagnoses in the patient's own words, medications
with an adherence status and the patient's explanation, warning signs, lab trends) from MIMIC-IV's notes with an
LLM, then removes every node the tables do not support (`phm/verifier.py`: a medication must be prescribed, a
diagnosis must align with the coded ones). ehrbench's world has no free-text history to mine, so `build` derives
the same kinds of facts by rules from what the record does hold (the note's chief complaint and past history, the
admission's type, marital status and disposition, the orders, the ICU stay, the gap since the last discharge) and
draws the rest (onset, habits, the reason for stopping a drug, how pain is put) from phrasings consistent with it,
seeded per admission so the set is varied and rebuilt identically. `contradictions` is the verifier: it reads the
answers' words (not the model that wrote them) against the record, so an answer the record refutes is caught.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import date

from ...world.vocab import vocabulary

SUDDEN = ("chest pain", "palpitations", "left-sided weakness", "pleuritic chest pain", "melena",
          "respiratory distress", "right upper quadrant pain", "epigastric pain")
ONSET = {"sudden": ["It came on suddenly a few hours before I came in.", "It started all at once last night.",
                    "It hit me out of nowhere that morning."],
         "days": ["It started about two days before I came in and got steadily worse.",
                  "It had been building for three or four days.",
                  "It started about a week ago and kept getting worse."],
         "planned": ["It's been bothering me for weeks, so this stay was planned.",
                     "I've had it for a few months; the doctors scheduled me to come in."]}
PLANNED = ("ELECTIVE", "SURGICAL SAME DAY ADMISSION")
SMOKING_CONDITIONS = ("copd", "coronary artery disease", "myocardial infarction", "stroke")
SMOKING = {"never": "I've never smoked.", "former": "I used to smoke, but I quit years ago.",
           "current": "I still smoke, about half a pack a day."}
ALCOHOL = {"none": "I don't drink.", "occasional": "I have a drink now and then.",
           "weekends": "I have a few beers on the weekend.",
           "heavy": "I used to drink a lot; I've been trying to cut down."}
LIVING = {"MARRIED": "I live with my spouse.", "WIDOWED": "I've lived alone since my spouse passed away.",
          "DIVORCED": "I live alone since the divorce.", "SINGLE": "I live alone."}
# how a patient puts what they can do, by discharge location; every variant holds its category's key word
FUNCTION = {"HOME": ("own", ["I get around on my own and take care of myself at home.",
                             "I do everything on my own: cooking, shopping, getting dressed.",
                             "I manage on my own, just a bit slower than before."]),
            "HOME HEALTH CARE": ("bathing", ["I can walk short distances, but I need help with bathing and dressing.",
                                             "I get tired quickly and need help with bathing and with the stairs."]),
            "REHAB": ("walker", ["I can't walk more than a few steps without a walker, and I need help with most "
                                 "things.", "I'm unsteady; I need the walker and someone beside me."]),
            "SKILLED NURSING FACILITY": ("walker", ["I can't walk more than a few steps without a walker, and I "
                                                    "need help with most things.",
                                                    "I need the walker to get to the bathroom, and help to dress."]),
            "CHRONIC/LONG TERM ACUTE CARE": ("bed", ["I spend most of the day in bed; I need help to sit up and eat.",
                                                     "I'm in bed most of the day and need help with everything."])}
# why a patient stops a drug (the original's adherence types: self_discontinued, ran_out, never_filled)
STOPPED = {"Lisinopril": [("self_discontinued", "it gave me a dry cough that wouldn't quit", ["cough"]),
                          ("self_discontinued", "it made me dizzy when I stood up", ["dizzy", "dizziness"])],
           "Furosemide": [("self_discontinued", "I was running to the bathroom all day", ["bathroom", "urinat"])],
           "Potassium chloride": [("self_discontinued", "the pills are huge and I couldn't swallow them",
                                   ["swallow"])],
           "Metformin": [("self_discontinued", "it upset my stomach", ["stomach", "nause"]),
                         ("ran_out", "I ran out and didn't get it refilled", ["ran out", "refill"])],
           "Enoxaparin sodium": [("self_discontinued", "I didn't like giving myself the shots", ["shot", "inject"])],
           "Heparin": [("self_discontinued", "I didn't like giving myself the shots", ["shot", "inject"])],
           "Aspirin": [("self_discontinued", "I was bruising all over", ["bruis"]),
                       ("self_discontinued", "it hurt my stomach", ["stomach"])],
           "Insulin": [("self_discontinued", "I had a couple of low sugars and got scared", ["low sugar", "hypogly"]),
                       ("ran_out", "I ran out and couldn't afford more", ["ran out", "afford", "cost"])],
           "Pantoprazole": [("self_discontinued", "I felt fine, so I figured I didn't need it", ["felt fine"]),
                            ("never_filled", "I never picked it up from the pharmacy", ["never", "pharmacy"])],
           "Atorvastatin": [("self_discontinued", "it made my muscles ache", ["muscle", "ache"]),
                            ("never_filled", "I never got it filled", ["never", "filled"])]}
WORRY = {"high": " I'm really worried it's something serious.", "medium": "", "low": ""}


@dataclass
class StoppedDrug:
    drug: str
    kind: str                  # self_discontinued / ran_out / never_filled
    reason: str
    reason_words: list[str]
    days: int                  # since the last discharge: when the patient stopped (or never started)

    @property
    def when(self) -> str:
        n = round(self.days / 7)
        return f"about {self.days} days ago" if self.days < 14 else f"about {n} weeks ago"


@dataclass
class PatientModel:
    """One patient's facts, each traceable to the record (or to a phrasing consistent with it)."""

    complaint: str
    onset: str
    onset_kind: str                                  # sudden / days / planned
    conditions: list[str]                            # chronic conditions in the patient's words
    own_diagnosis: str | None                        # what a self-diagnosing patient blames
    living: str
    smoking: str
    alcohol: str
    function: str
    function_key: str
    pain_now: int
    pain_at_admission: int
    pain_site: str | None                            # the complaint, when it is pain
    drugs: dict[str, dict] = field(default_factory=dict)
    stopped: StoppedDrug | None = None


def note_section(record, hadm: int, name: str) -> list[str]:
    """The lines of one section of the admission's discharge summary."""
    notes = record.rows("SELECT text FROM discharge WHERE hadm_id = ?", (hadm,))
    m = re.search(rf"{re.escape(name)}:\s*\n(.+?)\n\s*\n", notes[0]["text"] if notes else "", re.S)
    return [line.strip() for line in m.group(1).splitlines() if line.strip()] if m else []


def _condition_keys(lay_terms: list[str]) -> list[str]:
    by_lay = {c.lay[0].lower(): key for key, c in vocabulary().conditions.items()}
    return [by_lay[t.lower()] for t in lay_terms if t.lower() in by_lay]


def days_since_last_discharge(record, admission: dict, current_date: str) -> int | None:
    earlier = record.rows("SELECT dischtime FROM admissions WHERE admittime < ? AND dischtime IS NOT NULL "
                          "ORDER BY admittime", (admission["admittime"],))
    if not earlier:
        return None
    return (date.fromisoformat(current_date) - date.fromisoformat(str(earlier[-1]["dischtime"])[:10])).days


def build(ctx, focus_drug: str | None) -> PatientModel:
    """The patient's facts for one session (ctx: authoring.Context), seeded by the admission."""
    rng = random.Random(f"patient/{ctx.hadm}")
    a, p = ctx.admission, ctx.persona
    complaint = (note_section(ctx.record, ctx.hadm, "Chief Complaint") or ["feeling unwell"])[0]
    kind = "planned" if str(a.get("admission_type")) in PLANNED else \
        "sudden" if complaint in SUDDEN else "days"
    history = [t for t in note_section(ctx.record, ctx.hadm, "Past Medical History") if t != "None."]
    keys = _condition_keys(history)
    words = [vocabulary().conditions[k].lay[0] for k in keys]
    own = words[0] if p.get("self_diagnosis") == "present" and words else None
    smoking = "former" if set(keys) & set(SMOKING_CONDITIONS) else rng.choices(
        ["never", "former", "current"], [6, 3, 1])[0]
    alcohol = "heavy" if complaint in ("epigastric pain", "melena") and rng.random() < 0.5 else rng.choice(
        ["none", "occasional", "occasional", "weekends"])
    status = str(a.get("marital_status") or "SINGLE").upper()
    function_key, variants = FUNCTION.get(str(a.get("discharge_location")), FUNCTION["HOME"])
    icu = bool(ctx.record.rows("SELECT 1 FROM icustays WHERE hadm_id = ? LIMIT 1", (ctx.hadm,)))
    anxiety = {"low": 0, "medium": 1, "high": 2}[p.get("anxiety_level", "medium")]
    pain_site = complaint if "pain" in complaint else None
    at_admission = 7 + anxiety if pain_site else rng.randint(0, 2) + anxiety
    now = max(0, at_admission - (3 if icu else 4) - rng.randint(0, 1)) if pain_site else rng.randint(0, 1) + anxiety
    stopped = None
    gap = days_since_last_discharge(ctx.record, a, ctx.date)
    if p.get("adherence") == "poor" and focus_drug and gap is not None:
        options = STOPPED.get(focus_drug, [("self_discontinued", "I didn't think I needed it", ["need"])])
        kind_stop, reason, reason_words = rng.choice(options)
        stopped = StoppedDrug(focus_drug, kind_stop, reason, reason_words, gap)
    return PatientModel(complaint, rng.choice(ONSET[kind]), kind, words, own, LIVING.get(status, LIVING["SINGLE"]),
                        smoking, alcohol, rng.choice(variants), function_key, now, at_admission, pain_site,
                        dict(ctx.drugs), stopped)


def _simple(text: str) -> str:
    """A low-literacy rewording: everyday words for the few terms the phrasings use."""
    for term, plain in (("steadily ", ""), ("suddenly", "all of a sudden")):
        text = text.replace(term, plain)
    return text


def answers(model: PatientModel, persona: dict) -> list[dict]:
    """The stored replies per tool and topic, at three literacy levels (the original's
    patient_responses_all_literacy), in the persona's anxiety."""
    out = []
    worry = WORRY.get(persona.get("anxiety_level", "low"), "")
    withheld = persona.get("info_completeness") == "critical_withheld"

    def add(tool, topic, high, medium=None, low=None, hidden=False):
        out.append({"tool": tool, "topic": topic, "withheld": hidden,
                    "responses": {"high": high, "medium": medium or high, "low": low or _simple(medium or high)}})

    poor = model.stopped is not None
    general = "I think I'm taking everything I'm supposed to." if poor else \
        "I take all my medicines the way the doctor told me."
    add("patient.get_medication_adherence", "", general)
    for drug, d in model.drugs.items():
        if model.stopped and drug == model.stopped.drug:
            s = model.stopped
            verb = {"never_filled": "never started", "ran_out": "stopped taking"}.get(s.kind, "stopped taking")
            add("patient.get_medication_adherence", drug.lower(),
                f"To be honest, I {verb} the {drug} {s.when}, after I got home from the hospital, because "
                f"{s.reason}.", f"Honestly, I {verb} the {drug} {s.when}. {s.reason.capitalize()}.",
                f"I {verb} that {drug} {s.when}. {s.reason.capitalize()}.", hidden=withheld)
        else:
            how = "I do the shots myself" if d["route"] == "SC" else "I take it with breakfast" \
                if d["per_day"] <= 1 else "I keep them in a pill box"
            add("patient.get_medication_adherence", drug.lower(),
                f"Yes, I take the {drug} {d['dose']} {d['unit']} exactly as prescribed, every day. {how}.",
                f"Yes, I take the {drug} every day like I'm supposed to. {how}.",
                f"Yes, I take that {drug} every day.")
    blame = f" I think it's my {model.own_diagnosis} acting up again." if model.own_diagnosis else ""
    history = f" I have {', '.join(model.conditions[:-1]) + ' and ' if len(model.conditions) > 1 else ''}" \
              f"{model.conditions[-1]}." if model.conditions else ""
    add("patient.get_symptom_history", "",
        f"My main problem was {model.complaint}. {model.onset}{history}{blame}{worry}",
        f"I came in because of {model.complaint}. {model.onset}{blame}{worry}",
        f"I just had {model.complaint}. {model.onset}{blame}")
    add("patient.get_social_history", "", f"{model.living} {SMOKING[model.smoking]} {ALCOHOL[model.alcohol]}")
    add("patient.get_functional_status", "", model.function)
    where = f"It's from the {model.pain_site}." if model.pain_site and model.pain_now >= 3 else \
        "Nothing much hurts right now." if model.pain_now <= 1 else "Just sore from lying in bed."
    article = "an" if model.pain_at_admission in (8, 11, 18) else "a"
    was = f" When I came in it was {article} {model.pain_at_admission}." if model.pain_site else ""
    add("patient.get_pain_assessment", "", f"My pain is about a {model.pain_now} out of 10. {where}{was}{worry}",
        f"It hurts about {model.pain_now} out of 10. {where}{was}",
        f"It hurts, like a {model.pain_now} out of 10. {where}")
    return out


def contradictions(record, admission: dict, current_date: str, replies: list[dict]) -> list[str]:
    """What the record refutes in the stored replies (the original's `phm/verifier.py`, for answers): a drug the
    patient talks about that was not ordered this admission, a dose other than the order's, a stop date that is
    not the last discharge, a complaint other than the note's, a condition not in the patient's history, a home
    life other than the marital status, a never-smoker with COPD, a function other than the disposition's, a
    pain score outside 0-10 or pain put down to a complaint that is not pain. An empty list: nothing refuted."""
    hadm = int(admission["hadm_id"])
    found = []
    ordered = {r["drug"].lower(): r for r in record.rows(
        "SELECT drug, dose_val_rx, dose_unit_rx FROM prescriptions WHERE hadm_id = ?", (hadm,))}
    complaint = (note_section(record, hadm, "Chief Complaint") or ["feeling unwell"])[0]
    history = [t.lower() for t in note_section(record, hadm, "Past Medical History") if t != "None."]
    gap = days_since_last_discharge(record, admission, current_date)
    status = str(admission.get("marital_status") or "SINGLE").upper()
    location = str(admission.get("discharge_location"))
    for reply in replies:
        tool, topic = reply["tool"], reply["topic"]
        for literacy, text in reply["responses"].items():
            where = f"{tool}[{topic or '-'}] ({literacy})"
            low = text.lower()
            if tool == "patient.get_medication_adherence" and topic:
                if topic not in ordered:
                    found.append(f"{where}: {topic} is not ordered this admission")
                dose = re.search(r"the [\w ]+? ([\d.]+) (\S+) exactly as prescribed", text)
                if dose and topic in ordered and float(dose.group(1)) != float(ordered[topic]["dose_val_rx"]):
                    found.append(f"{where}: dose {dose.group(1)} is not the order's {ordered[topic]['dose_val_rx']}")
                when = re.search(r"about (\d+) (days|weeks) ago", low)
                if when:
                    days = int(when.group(1)) * (7 if when.group(2) == "weeks" else 1)
                    if gap is None or abs(days - gap) > (0 if when.group(2) == "days" else 3):
                        found.append(f"{where}: stopped {when.group(0)}, but the last discharge was "
                                     f"{'never' if gap is None else f'{gap} days ago'}")
            if tool == "patient.get_symptom_history":
                if complaint.lower() not in low:
                    found.append(f"{where}: the complaint is not the note's ({complaint})")
                blamed = re.search(r"it's my (.+?) acting up", low)
                if blamed and blamed.group(1) not in history:
                    found.append(f"{where}: {blamed.group(1)} is not in the patient's history")
                named = re.search(r"i have (.+?)\.", low)
                for term in re.split(r", | and ", named.group(1)) if named else []:
                    if term not in history:
                        found.append(f"{where}: {term} is not in the patient's history")
            if tool == "patient.get_social_history":
                spouse = "with my spouse" in low
                if spouse != (status == "MARRIED"):
                    found.append(f"{where}: the home life does not fit the marital status {status}")
                if "never smoked" in low and "copd" in history:
                    found.append(f"{where}: a never-smoker with COPD in the history")
            if tool == "patient.get_functional_status":
                key = FUNCTION.get(location, FUNCTION["HOME"])[0]
                if key not in low:
                    found.append(f"{where}: the function does not fit discharge to {location}")
            if tool == "patient.get_pain_assessment":
                score = re.search(r"(\d+) out of 10", low)
                if not score or not 0 <= int(score.group(1)) <= 10:
                    found.append(f"{where}: no pain score from 0 to 10")
                blamed = re.search(r"it's from the (.+?)\.", low)
                if blamed and ("pain" not in blamed.group(1) or blamed.group(1) != complaint.lower()):
                    found.append(f"{where}: pain put down to {blamed.group(1)}, not the complaint ({complaint})")
    return found
