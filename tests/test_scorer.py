"""EHR-ChatQA rewards, case by case as the authors' code scores them (glee4810/EHR-ChatQA src/envs/base.py).

Each case is (gold answer as a task file holds it, what the agent sent, the original's reward), worked out by hand
from `calculate_reward_ans` / `calculate_reward_sql`; the generalised number words are marked.
"""
import asyncio
import sqlite3

import pytest

from ehrbench.benchmarks.ehrchatqa.benchmark import score
from ehrbench.benchmarks.ehrchatqa.scoring import adapt_reward, gold_answers, words_to_int
from ehrbench.benchmarks.ehrchatqa.scoring import incre_reward as incre_reward_async
from ehrbench.benchmarks.ehrchatqa.tasks import Task
from ehrbench.db.database import Database
from ehrbench.runtime.hosts import LocalHost
from ehrbench.trial import TrialRecord


def incre_reward(queries, gold, execute):
    async def run_query(sql):
        return execute(sql)
    return asyncio.run(incre_reward_async(queries, gold, run_query))


def run(rows):
    return lambda sql: rows


ADAPT_CASES = [
    # number words, both ways (the original's table: "thirty-five", "two hundred and forty-seven", ...)
    ([["thirty-five"]], "<answer>35</answer>", 1.0),
    ([["thirty-five"]], "<answer>thirty five</answer>", 1.0),
    ([["thirty-five"]], "<answer>Thirty-Five</answer>", 1.0),
    ([["two hundred and forty-seven"]], "<answer>247</answer>", 1.0),
    ([["two hundred forty-seven"]], "<answer>two hundred and forty-seven</answer>", 1.0),
    ([["nineteen"]], "<answer>19</answer>", 1.0),
    ([[35]], "<answer>thirty-five</answer>", 1.0),                 # an answer that is exactly a number word
    ([["twenty-one"]], "<answer>21</answer>", 1.0),                # a gold word outside the table: also its digits
    ([["one thousand and four"]], "<answer>1004</answer>", 1.0),   # (the original's files hold none)
    ([["thirty-five"]], "<answer>35 patients</answer>", 0.0),      # anything left over fails
    ([["thirty-five"]], "<answer>about thirty-five</answer>", 0.0),
    # trailing zeros and float golds
    ([[0.01]], "<answer>0.0100</answer>", 1.0),
    ([[5.5]], "<answer>5.5000</answer>", 1.0),
    ([[7.0]], "<answer>7</answer>", 1.0),
    ([["7"]], "<answer>7.0</answer>", 1.0),
    ([[72.666666]], "<answer>72.6667</answer>", 1.0),
    ([["12.5"]], "<answer>12.5%</answer>", 1.0),
    ([["3"]], "<answer>3.0000 days</answer>", 1.0),
    # extraction: tag, ```answer, a bare fenced block; case-sensitive tag; the first match of a message only
    ([["thirty-five"]], "```\n35\n```", 1.0),
    ([["thirty-five"]], "Here:\n```answer\n35\n```", 1.0),
    ([["thirty-five"]], "<ANSWER>35</ANSWER>", 0.0),
    ([["thirty-five"]], "<answer>12</answer> or rather <answer>35</answer>", 0.0),
    ([["thirty-five"]], "the answer is 35", 0.0),
    # only the first column of the gold counts; several rows are several values
    ([["aspirin", "2100-01-01 00:00:00"]], "<answer>aspirin</answer>", 1.0),
    ([["warfarin"], ["heparin"]], "<answer>Warfarin and heparin</answer>", 1.0),
    ([["warfarin"], ["heparin"]], "<answer>warfarin</answer>", 0.0),
    # nested and duplicated golds are removed longest first, once each
    ([["1"], ["10"]], "<answer>1, 10</answer>", 1.0),
    ([["two"], ["two"]], "<answer>2 and 2</answer>", 1.0),
    ([["1"], ["10"]], "<answer>1, 11</answer>", 0.0),
    # the original's trailing-zero strip also lets "10" pass for a gold "1": its rule, kept as it is
    ([["one"]], "<answer>10</answer>", 1.0),
]


@pytest.mark.parametrize("gold, message, expected", ADAPT_CASES)
def test_adapt_reward_matches_the_original(gold, message, expected):
    assert adapt_reward([message], gold) == expected


@pytest.mark.parametrize("gold, answer", [("two", "twenty"), ("two", "two hundred"), ("one", "one hundred"),
                                          ("four", "forty"), ("five", "fifty"), ("six", "sixty")])
def test_an_answer_word_outside_the_originals_table_stays_a_word_under_the_original_contract(gold, answer):
    """The original maps only its table's words (base.py `numeric_to_words`): "twenty" stays a word, so gold "two"
    fails; ehrbench's any-cardinal rule maps it to 20, which the trailing-zero strip then passes."""
    message = f"<answer>{answer}</answer>"
    assert adapt_reward([message], [[gold]]) == 0.0
    assert adapt_reward([message], [[gold]], any_cardinal=True) == 1.0


def test_a_gold_word_outside_the_table_passes_as_words_as_in_the_original_and_as_digits():
    assert adapt_reward(["<answer>twelve days</answer>"], [["twelve"]]) == 1.0           # the original: words
    assert adapt_reward(["<answer>12</answer>"], [["twelve"]]) == 1.0                    # and its digits
    assert adapt_reward(["<answer>twelve-ish</answer>"], [["twelve"]]) == 0.0
    assert adapt_reward(["<answer>one hundred four</answer>"], [["one hundred and four"]]) == 1.0
    assert adapt_reward(["<answer>twenty</answer>"], [["twelve"]]) == 0.0


def test_adapt_any_message_may_carry_the_answer():
    gold = [["2100-10-12 20:00:00"]]
    assert adapt_reward(["<answer>No, not prescribed.</answer>", "Done.\n```answer\n2100-10-12 20:00:00\n```"],
                        gold) == 1.0


def test_number_words_parse_any_cardinal_and_nothing_else():
    assert words_to_int("two hundred and forty-seven") == 247
    assert words_to_int("six hundred fifty-nine") == 659
    assert words_to_int("one million two hundred thousand") == 1_200_000
    assert words_to_int("zero") == 0
    for text in ("and", "forty-seven cats", "", "hundred and", "seven and"):
        assert words_to_int(text) is None
    assert gold_answers([["Thirty-Five"], [7.0], ["Aspirin"]]) == ["7", "aspirin", "35"]   # rows sorted first, as process_result does


def adapt_task():
    return Task(db_id="mimic_iv_star", task_id="1", task_type="adapt", instruction="", gold_sql="",
                gold_answer=[["three"]])


def test_adapt_scores_only_messages_the_user_was_shown():
    """Text sent beside a tool call never reaches the simulated user, so the original never scores it."""
    beside_call = {"role": "assistant", "content": "<answer>three</answer>",
                   "tool_call": {"name": "sql_execute", "arguments": {"query": "SELECT 3"}, "id": "c1"}}
    shown = {"role": "assistant", "content": "<answer>three</answer>", "tool_call": None}
    later = {"role": "assistant", "content": "I found it.", "tool_call": None}
    unseen = TrialRecord("t", 0, "user_stop", None, messages=[beside_call, later])
    seen = TrialRecord("t", 0, "user_stop", None, messages=[shown, later])
    assert asyncio.run(score(adapt_task(), unseen, None)) == 0.0
    assert asyncio.run(score(adapt_task(), seen, None)) == 1.0


# --- IncreQA -----------------------------------------------------------------------------------------------------
def test_incre_ignores_extra_columns_duplicates_and_order():
    gold = [["a"], ["b"]]
    assert incre_reward(["q"], gold, run([(1, "b"), (2, "a"), (3, "a")])) == 1.0
    assert incre_reward(["q"], gold, run([(1, "b")])) == 0.0


def test_incre_rounds_numbers_and_drops_none_from_the_prediction_only():
    assert incre_reward(["q"], [[72.66666]], run([(72.666661,), (None,)])) == 1.0
    assert incre_reward(["q"], [[72.6667]], run([(72.6668,)])) == 0.0
    assert incre_reward(["q"], [[5]], run([("5.0",)])) == 1.0
    # a gold holding None keeps "None" in its set while the prediction's is dropped: the original never matches
    assert incre_reward(["q"], [["a"], [None]], run([("a",), (None,)])) == 0.0


def test_incre_any_query_counts_and_failing_queries_are_skipped():
    def execute(sql):
        if sql == "bad":
            raise RuntimeError("syntax")
        return [(1,)] if sql == "good" else [(2,)]
    assert incre_reward(["bad", "other", " good\n"], [[1]], execute) == 1.0
    assert incre_reward(["bad", "other"], [[1]], execute) == 0.0


def test_incre_over_100_rows_sorts_all_rows_before_keeping_100(tmp_path):
    """The original sorts every row, then compares the first 100: rows past the 100th in query order still count."""
    path = tmp_path / "many.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (v TEXT)")
        con.executemany("INSERT INTO t VALUES (?)", [(f"v{i:03d}",) for i in range(150)])
    gold = [[f"v{i:03d}"] for i in range(150)]
    task = Task(db_id="mimic_iv_star", task_id="1", task_type="incre", instruction="", gold_sql="", gold_answer=gold)
    call = {"name": "sql_execute", "arguments": {"query": "SELECT v FROM t ORDER BY v DESC"}, "id": "c"}
    record = TrialRecord("t", 0, "user_stop", None, messages=[{"role": "assistant", "content": None,
                                                              "tool_call": call}])
    db = LocalHost(Database(path))
    assert asyncio.run(score(task, record, db)) == 1.0
    call["arguments"]["query"] = "SELECT v FROM t WHERE v < 'v100' ORDER BY v DESC"
    assert asyncio.run(score(task, record, db)) == 1.0   # the gold's first 100 after sorting are v000..v099
    call["arguments"]["query"] = "SELECT v FROM t WHERE v > 'v000'"
    assert asyncio.run(score(task, record, db)) == 0.0


def test_counts_of_a_thousand_and_more_in_num2words_form_match_their_digits():
    from num2words import num2words

    assert adapt_reward(["<answer>1100</answer>"], [[num2words(1100)]]) == 1.0      # "one thousand, one hundred"
    assert adapt_reward(["<answer>2500</answer>"], [["two thousand, five hundred"]]) == 1.0
    assert words_to_int("two, three") is None and words_to_int("two three") is None   # a list, not five
    assert all(words_to_int(num2words(n)) == n for n in range(0, 2100))
