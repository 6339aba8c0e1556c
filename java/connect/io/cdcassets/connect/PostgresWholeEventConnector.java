package io.cdcassets.connect;

import org.apache.kafka.connect.connector.Task;

/** Debezium's Postgres connector whose task commits whole source events only ({@link WholeEventOffsets}). */
public class PostgresWholeEventConnector extends io.debezium.connector.postgresql.PostgresConnector {
    @Override
    public Class<? extends Task> taskClass() {
        return PostgresWholeEventTask.class;
    }
}
