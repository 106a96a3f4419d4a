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


def test_an_index_restarted_where_its_runs_manifest_is_missing_says_to_share_the_cache(tmp_path):
    """A restarted index actor on a machine that does not share data.index_cache: a clear error, not "not indexed"."""
    import pytest

    elsewhere = ValueIndex(tmp_path / "other-node", manifest="run-1")
    with pytest.raises(RuntimeError, match="put data.index_cache on a volume every node mounts"):
        elsewhere.search("mimic_iv_star", "labtesttypes", "itemname", "glucose")
    with pytest.raises(KeyError, match="not indexed"):                    # without a manifest: the plain answer
        ValueIndex(tmp_path / "plain").search("mimic_iv_star", "labtesttypes", "itemname", "glucose")
