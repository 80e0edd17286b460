"""The Spark pipeline: a PySpark data source named ``leveled`` (:mod:`.source`), and
Ray-on-Spark (:mod:`.ray_on_spark`). Needs the ``spark`` extra (pyspark).

::

    import leveled_ray.spark as lrs
    spark = lrs.session()                      # or: lrs.register(existing_session)
    df.write.format("leveled").option("url", url).mode("append").save()
    spark.read.format("leveled").option("url", url).load()
"""

from .ray_on_spark import RayOnSpark, start_ray_on_spark
from .source import FORMAT, LeveledDataSource, read_query, register, session, store_options

__all__ = ["FORMAT", "LeveledDataSource", "RayOnSpark", "read_query", "register", "session",
           "start_ray_on_spark", "store_options"]
