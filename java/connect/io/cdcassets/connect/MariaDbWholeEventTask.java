package io.cdcassets.connect;

import java.util.List;

import org.apache.kafka.connect.source.SourceRecord;

/** Debezium's MariaDb task with the offsets of {@link WholeEventOffsets}. */
public class MariaDbWholeEventTask extends io.debezium.connector.mariadb.MariaDbConnectorTask {
    private final WholeEventOffsets offsets = new WholeEventOffsets();

    @Override
    public List<SourceRecord> doPoll() throws InterruptedException {
        return offsets.apply(context, super.doPoll());
    }
}
