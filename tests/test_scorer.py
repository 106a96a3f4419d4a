import asyncio

from ehrbench.benchmarks.ehrchatqa.scorer import adapt_reward, answer_matches
from ehrbench.benchmarks.ehrchatqa.scorer import incre_reward as incre_reward_async


def incre_reward(queries, gold, execute):
    async def run_query(sql):
        return execute(sql)
    return asyncio.run(incre_reward_async(queries, gold, run_query))


def run(rows):
    return lambda sql: rows


def test_incre_ignores_extra_columns_duplicates_and_order():
    gold = [["a"], ["b"]]
    assert incre_reward(["q"], gold, run([(1, "b"), (2, "a"), (3, "a")])) == 1.0
    assert incre_reward(["q"], gold, run([(1, "b")])) == 0.0


def test_incre_rounds_numbers_and_drops_none():
    assert incre_reward(["q"], [[72.66666]], run([(72.666661,), (None,)])) == 1.0
    assert incre_reward(["q"], [[72.6667]], run([(72.6668,)])) == 0.0
    assert incre_reward(["q"], [[5]], run([("5.0",)])) == 1.0


def test_incre_any_query_counts_and_failing_queries_are_skipped():
    def execute(sql):
        if sql == "bad":
            raise RuntimeError("syntax")
        return [(1,)] if sql == "good" else [(2,)]
    assert incre_reward(["bad", "other", "good"], [[1]], execute) == 1.0
    assert incre_reward(["bad", "other"], [[1]], execute) == 0.0


def test_adapt_numeral_words_and_residue_tokens():
    assert answer_matches("19", ["nineteen"])
    assert answer_matches("Nineteen", ["nineteen"])
    assert answer_matches("12.5%", ["12.5"])
    assert answer_matches("3.0000 days", ["3"])
    assert answer_matches("warfarin and heparin", ["warfarin", "heparin"])
    assert not answer_matches("warfarin", ["warfarin", "heparin"])
    assert not answer_matches("about nineteen patients", ["nineteen"])


def test_adapt_reads_answer_tags_and_fences_in_any_message():
    gold = [["2100-10-12 20:00:00"]]
    msgs = ["<answer>No, not prescribed.</answer>", "Done.\n```answer\n2100-10-12 20:00:00\n```"]
    assert adapt_reward(msgs, gold) == 1.0
    assert adapt_reward(["the answer is 2100-10-12 20:00:00"], gold) == 0.0  # no tag, no credit
