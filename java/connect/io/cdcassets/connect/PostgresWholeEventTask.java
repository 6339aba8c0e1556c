package io.cdcassets.connect;

import java.util.List;

import org.apache.kafka.connect.source.SourceRecord;

/** Debezium's Postgres task with the offsets of {@link WholeEventOffsets}. */
public class PostgresWholeEventTask extends io.debezium.connector.postgresql.PostgresConnectorTask {
    private final WholeEventOffsets offsets = new WholeEventOffsets();

    @Override
    public List<SourceRecord> doPoll() throws InterruptedException {
        return offsets.apply(context, super.doPoll());
    }
}
