"""The people of a PhysAssistBench session: the physician who asks the four questions, and the patient the agent
interviews through the `patient.*` tools.

The physician is scripted: the session's questions in order (implicit, or the explicit paraphrases for the
ablation), one after each answer, and the conversation ends after the fourth.

The patient, under `benchmark.patient_replay=original` (the contract's default), is the original's replay
(`OriginalReplay`: eval_runner's preload and `PatientAgentRuntime._get_preloaded`): the stored replies of the
session's gold interview calls, bucketed by tool in file order, at the run's literacy variant, handed out in order
per tool and cycling, whatever the agent asks; a persona whose literacy is not "high" uses up a second stored reply
per call (the original reruns the call as "high" to build its literacy variants); a tool with no stored reply is
answered live (`user=` an LLM: the patient prompt below) or, with the scripted user, by the original's own
rule-based fallback.

ehrbench's topic replay (`patient_replay=topic`, `contract=ehrbench`) answers from facts taken from the record
(`patient_answers`: per tool and topic, three literacy variants of the same facts):
- replayed (deterministic): the stored variant at the run's literacy (the original locks it to "high";
  `benchmark.patient_literacy=persona` uses the session persona's);
- live (`user=` an LLM): the original's patient prompt, in character for the persona, given only the facts the
  replay would release, at temperature 0.7.
A withheld fact (a `critical_withheld` persona's non-adherence) is released only when the agent names its drug, and
stays released for the rest of the session.
"""
from __future__ import annotations

from collections import defaultdict

from ...llm.base import ChatRequest, Sampling
from ...llm.usage import MeteredModel
from ...trial import Message, Turn
from .tasks import LITERACY, Session

QUERIES = {
    "patient.get_symptom_history": "get_symptom_history", "patient.get_medication_adherence":
    "get_medication_adherence", "patient.get_social_history": "get_social_history",
    "patient.get_functional_status": "get_functional_status", "patient.get_pain_assessment": "get_pain_assessment"}
DESCRIPTIONS = {
    "literacy": {"low": "uses simple everyday words, avoids medical terms, may misunderstand jargon",
                 "medium": "understands basic medical concepts but asks for clarification on complex terms",
                 "high": "medically literate, uses correct terminology, describes symptoms precisely"},
    "adherence": {"good": "takes all medications as prescribed and follows medical advice closely",
                  "uncertain": "sometimes forgets doses or is unsure about medication schedules",
                  "poor": "often misses doses, has stopped some medications, or never filled some prescriptions"},
    "anxiety": {"low": "calm and matter-of-fact about their symptoms",
                "medium": "somewhat anxious and sometimes uses emotional language",
                "high": "visibly anxious, worried about their condition, may emphasize worst symptoms"}}
NOT_SURE = "I'm not sure, doctor. I don't remember anything about that."


def _topic_of(tool: str, arguments: dict) -> str:
    return str(arguments.get("drug") or arguments.get("query") or "").strip().lower()


def _matches(topic: str, asked: str) -> bool:
    topic = topic.lower()
    return bool(topic and asked) and (topic in asked or asked in topic)


class PatientFacts:
    """Which stored answers a question releases (both patients use it, so they know the same things)."""

    def __init__(self, answers: tuple[dict, ...]):
        self.answers = answers
        self.revealed: set[int] = set()

    def release(self, tool: str, arguments: dict) -> list[dict]:
        asked = _topic_of(tool, arguments)
        mine = [(i, a) for i, a in enumerate(self.answers) if a["tool"] == tool]
        named = [(i, a) for i, a in mine if _matches(a.get("topic", ""), asked)]
        if named:
            self.revealed.update(i for i, _ in named)
            return [a for _, a in named]
        general = [a for i, a in mine if not a.get("topic") and (not a.get("withheld") or i in self.revealed)]
        if general:
            return general
        told = [a for i, a in mine if not a.get("withheld") or i in self.revealed]
        return told[:1]


class ReplayedPatient:
    def __init__(self, facts: PatientFacts, literacy: str):
        self.facts, self.literacy = facts, literacy

    async def answer(self, tool: str, arguments: dict) -> str:
        released = self.facts.release(tool, arguments)
        return " ".join(a["responses"][self.literacy] for a in released) if released else NOT_SURE


class LlmPatient:
    """The original's `PatientAgentRuntime.respond`, its PHM nodes replaced by the released facts."""

    def __init__(self, model: MeteredModel, facts: PatientFacts, persona: dict, prompts: dict, seed: int,
                 sampling: Sampling = Sampling(temperature=0.7, max_tokens=300, max_tokens_name="max_tokens")):
        self.model, self.facts, self.persona, self.prompts, self.seed = model, facts, persona, prompts, seed
        self.params = sampling.request(seed)
        self.asked: list[str] = []

    def system(self) -> str:
        p = {k: self.persona.get(f, d) for k, f, d in (("literacy", "health_literacy", "medium"),
                                                       ("adherence", "adherence", "good"),
                                                       ("anxiety", "anxiety_level", "low"))}
        return self.prompts["patient_system"].format(
            **p, **{f"{k}_desc": DESCRIPTIONS[k].get(v, "") for k, v in p.items()})

    async def answer(self, tool: str, arguments: dict) -> str:
        query, drug = str(arguments.get("query") or ""), str(arguments.get("drug") or "")
        desc = {"get_symptom_history": "The doctor is asking about your symptom history"
                                       f"{f' related to: {query}' if query else ''}.",
                "get_medication_adherence": f"The doctor is asking whether you are taking {drug or 'your medications'}"
                                            " as prescribed.",
                "get_social_history": "The doctor is asking about your living situation, habits, and social "
                                      "background.",
                "get_functional_status": "The doctor is asking how you're managing daily activities and whether "
                                         "symptoms limit your function.",
                "get_pain_assessment": "The doctor is asking you to describe any pain you are experiencing."}
        kind = QUERIES.get(tool, tool)
        released = self.facts.release(tool, arguments)
        nodes = "Your relevant medical information:\n" + "".join(
            f"  [Fact] {a['responses']['high']}\n" for a in released) if released else \
            "Your relevant medical information:\n  (nothing on record about this: say you are not sure)\n"
        prior = "\n".join(f"  - You discussed {q}" for q in self.asked[-3:])
        self.asked.append(f"{kind} ({query or drug})" if query or drug else kind)
        prompt = self.prompts["patient_user"].format(query_desc=desc.get(kind, f"The doctor is asking: {query}"),
                                                     nodes=nodes.rstrip("\n"), prior=prior)
        reply = await self.model.complete(ChatRequest([Message("user", prompt)], system=self.system(), **self.params))
        return (reply.text or "").strip()           # an empty reply passes as it came, as the original's


# PatientAgentRuntime._fallback_response (English, no PHM nodes): what the original says when its LLM is unavailable
FALLBACK = {"get_chief_complaint": "I haven't been feeling well lately, so the doctor sent me in.",
            "get_medication_adherence": "I try to take my medications but I'll be honest, I've missed some doses.",
            "get_pain_assessment": "I've been having some pain, maybe a 5 out of 10."}
FALLBACK_OTHER = "I've been managing as best I can. It's been difficult."


def stored_replies(session: Session, literacy: str) -> dict[str, list[str]]:
    """eval_runner's preload: every gold action whose observation holds a `patient_response`, bucketed by tool in
    file order, each replaced by its `patient_responses_all_literacy[literacy]` variant where there is one."""
    buckets: dict[str, list[str]] = defaultdict(list)
    for actions in session.raw.get("answer_list") or []:
        for a in actions or []:
            obs = a.get("observation") if isinstance(a, dict) else None
            if isinstance(obs, dict) and "patient_response" in obs:
                variants = obs.get("patient_responses_all_literacy")
                text = variants.get(literacy, obs["patient_response"]) if isinstance(variants, dict) \
                    else obs["patient_response"]
                buckets[str((a.get("action") or a).get("name", ""))].append(str(text))
    return dict(buckets)


class OriginalReplay:
    """The original's patient in evaluation: stored replies per tool, in order, cycling; arguments play no part."""

    def __init__(self, replies: dict[str, list[str]], persona_literacy: str, live=None):
        self.replies, self.used = replies, defaultdict(int)
        self.extra = persona_literacy != "high"      # the "high" rerun uses up the next reply of the same tool
        self.live = live                             # a tool with no stored reply: the LLM patient, if any

    def _next(self, tool: str) -> str:
        bucket = self.replies[tool]
        reply = bucket[self.used[tool] % len(bucket)]
        self.used[tool] += 1
        return reply

    async def answer(self, tool: str, arguments: dict) -> str:
        if not self.replies.get(tool):
            if self.live is not None:
                return await self.live.answer(tool, arguments)
            return FALLBACK.get(QUERIES.get(tool, tool), FALLBACK_OTHER)
        reply = self._next(tool)
        if self.extra:
            self._next(tool)
        return reply


class SessionPeople:
    """The session's user: the physician's questions (`reply`) and the patient's answers (`answer_tool`)."""

    def __init__(self, session: Session, explicit: bool, patient, call=None):
        self.questions = [t.explicit if explicit else t.question for t in session.turns]
        self.patient, self.call = patient, call       # call: the scripted physician's metered "model call"

    async def reply(self, history: list[Message]) -> Turn:
        if self.call is not None:
            await self.call()
        asked = sum(1 for m in history if m.role == "user")
        if asked < len(self.questions):
            return Turn(self.questions[asked])
        return Turn("Thank you.", done=True)

    async def answer_tool(self, name: str, arguments: dict) -> str:
        return await self.patient.answer(name, arguments)


def literacy_for(session: Session, option: str) -> str:
    """The replayed variant: the option (low | medium | high), or the session persona's (`persona`)."""
    chosen = session.persona.get("health_literacy", "high") if option == "persona" else option
    return chosen if chosen in LITERACY else "high"
