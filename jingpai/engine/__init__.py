"""Engine access: the local node harness (:mod:`jingpai.engine.harness`) and the one client module that
hides Elasticsearch/OpenSearch differences (:mod:`jingpai.engine.client`)."""
