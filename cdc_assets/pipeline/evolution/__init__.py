"""Schema evolution: the source's shape from Kafka, the stored spec versions, the three phases of an
evolution, the catch-up of runs that raced one, views and schema packages."""
