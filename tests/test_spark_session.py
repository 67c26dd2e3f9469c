"""The shared Spark session helper: clear errors before the JVM starts, loopback on local masters."""

from __future__ import annotations

import pytest

from jingpai import spark
from jingpai.errors import UserError


@pytest.mark.usefixtures("without_pyspark")
def test_missing_pyspark_is_one_line_naming_the_extra() -> None:
    with pytest.raises(UserError, match=r"pip install 'jingpai\[spark\]'"):
        spark.require_pyspark()


def test_missing_java_names_java_17(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(spark.SparkUnavailable, match="needs Java 17"):
        spark.require_java()


@pytest.mark.parametrize(("master", "local"), [("local", True), ("local[2]", True), ("local[*]", True),
                                                ("spark://h:7077", False), ("yarn", False)])
def test_is_local(master: str, local: bool) -> None:
    assert spark.is_local(master) is local


@pytest.mark.spark
def test_local_session_binds_loopback_and_sizes_shuffles() -> None:
    session = spark.spark_session(app_name="jingpai-test", master="local[2]")
    try:
        assert session.conf.get("spark.driver.host") == "127.0.0.1"
        assert session.conf.get("spark.sql.shuffle.partitions") == "2"
        assert session.sparkContext.parallelize(range(10), 2).sum() == 45
    finally:
        session.stop()
