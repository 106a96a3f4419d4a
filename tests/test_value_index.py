from ehrbench.retrieval.value_index import ValueIndex

VALUES = ["hemoglobin", "hematocrit", "troponin t", "glucose", "creatinine", "white blood cells", "platelet count"]


def test_embeds_once_then_reuses_the_cache(tmp_path):
    first = ValueIndex(tmp_path)
    first.add_column("mimic_iv_star", "labtesttypes", "itemname", VALUES)
    assert first.embedded_values == len(VALUES)
    assert first.search("mimic_iv_star", "labtesttypes", "itemname", "blood sugar", k=1) == ["glucose"]
    assert first.search("mimic_iv_star", "labtesttypes", "itemname", "WBC count", k=1) == ["white blood cells"]

    second = ValueIndex(tmp_path)
    second.add_column("eicu_star", "lab", "lab_name", VALUES)  # same content: same index, no embedding
    assert second.embedded_values == 0
    assert second.embedder._model is None  # the model was not even loaded to build it
    second.add_column("eicu_star", "lab", "other", VALUES + ["lactate"])  # new content: embedded
    assert second.embedded_values == len(VALUES) + 1


def test_a_replacement_with_the_runs_manifest_serves_its_columns_from_the_cache_alone(tmp_path):
    """What a value-index actor restarted on another node does: the run's columns come back, nothing is embedded."""
    built = ValueIndex(tmp_path, manifest="run-1")
    built.add_column("mimic_iv_star", "labtesttypes", "itemname", VALUES)
    built.add_column("eicu_star", "lab", "lab_name", VALUES[:3])
    expected = built.search("mimic_iv_star", "labtesttypes", "itemname", "blood sugar", k=2)

    replacement = ValueIndex(tmp_path, built.embedder, manifest="run-1")
    assert replacement.embedded_values == 0
    assert replacement.indexed("mimic_iv_star") == [("labtesttypes", "itemname")]
    assert replacement.indexed("eicu_star") == [("lab", "lab_name")]
    assert replacement.search("mimic_iv_star", "labtesttypes", "itemname", "blood sugar", k=2) == expected
    assert replacement.search("eicu_star", "lab", "lab_name", "hemoglobin", k=5) == \
        built.search("eicu_star", "lab", "lab_name", "hemoglobin", k=5)

    assert ValueIndex(tmp_path, built.embedder, manifest="run-2").indexed("mimic_iv_star") == []  # another run's
    replacement.forget()                                   # the run ended: its manifest goes, the indexes stay
    assert ValueIndex(tmp_path, built.embedder, manifest="run-1").indexed("mimic_iv_star") == []
    assert list(tmp_path.glob("*.faiss"))


def test_an_index_restarted_where_its_runs_manifest_or_files_are_missing_says_why_and_how(tmp_path):
    """A restarted index actor on a machine that does not share data.index_cache, or whose cache was cleared: a clear
    error at its start (the actor is gone for good, and the trials' records say why), never "not indexed" later."""
    import pytest

    with pytest.raises(FileNotFoundError, match="put data.index_cache on a volume every node mounts"):
        ValueIndex(tmp_path / "other-node", manifest="run-1", restarted=True)
    assert ValueIndex(tmp_path / "first-start", manifest="run-1").indexed("mimic_iv_star") == []  # a first start

    built = ValueIndex(tmp_path / "cache", manifest="run-1")
    key = built.add_column("mimic_iv_star", "labtesttypes", "itemname", VALUES)
    (tmp_path / "cache" / f"{key}.faiss").unlink()                  # the cache cleared during the run
    with pytest.raises(FileNotFoundError, match="was the index cache cleared during the run"):
        ValueIndex(tmp_path / "cache", built.embedder, manifest="run-1", restarted=True)
