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
