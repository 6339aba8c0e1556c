package io.cdcassets.connect;

import org.apache.kafka.connect.connector.Task;

/** Debezium's MariaDb connector whose task commits whole source events only ({@link WholeEventOffsets}). */
public class MariaDbWholeEventConnector extends io.debezium.connector.mariadb.MariaDbConnector {
    @Override
    public Class<? extends Task> taskClass() {
        return MariaDbWholeEventTask.class;
    }
}
