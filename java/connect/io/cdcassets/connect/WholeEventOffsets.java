package io.cdcassets.connect;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTaskContext;

/**
 * Gives a Debezium record that is not the last record of its source event the offset of the last
 * complete event, so that an offset commit never covers half an event.
 *
 * <p>One source event can become several Connect records that all carry the offset that means
 * "resume after this event": a primary-key update becomes a delete, its tombstone and a create;
 * a delete becomes the delete and its tombstone; with transaction metadata, a transaction's BEGIN
 * record shares the offset of its first change. Connect commits the offset of the last record the
 * broker acknowledged. When the worker dies after the first record's offset was committed and
 * before the rest were sent, the restarted task resumes after the event and its other records are
 * never sent: the new row of a primary-key update, or a transaction's first change, is lost (the
 * upstream issue is debezium/dbz#2549). With the earlier offset the restarted task sends the whole
 * event again, which at-least-once consumers already expect.
 *
 * <p>A record is not its event's last when a record with the same partition and offset follows it
 * in the batch, or, across batch boundaries, by its kind: a delete that carries the
 * {@code __debezium.newkey} header and the tombstone after it, a delete while tombstones are on, a
 * transaction's BEGIN. The first such record after a start takes the offset Connect stored.
 *
 * <p>{@value #ENABLED}={@code false} keeps Debezium's offsets. {@value #HALT_FILE} is a test hook:
 * while that file exists, the first batch holding a primary-key update's delete is cut after it,
 * nothing more is sent, and the worker's JVM halts a few offset commits later (the file is
 * removed first).
 */
final class WholeEventOffsets {
    static final String ENABLED = "cdc.assets.whole.event.offsets";
    static final String HALT_FILE = "cdc.assets.test.halt.after.moved.delete";
    static final String NEW_KEY = "__debezium.newkey";
    static final String OLD_KEY = "__debezium.oldkey";
    // Longer than two offset-commit periods of the project's worker (1 s each).
    private static final long HALT_DELAY_MS = 4000;

    private final Map<Map<String, ?>, Map<String, ?>> complete = new HashMap<>();
    private final Map<Map<String, ?>, Boolean> looked = new HashMap<>();
    private boolean configured;
    private boolean enabled = true;
    private boolean tombstones = true;
    private Path haltFile;
    private long haltAt; // when the test hook halts the JVM (0: it does not)
    private boolean moving; // after a primary-key update's delete, before its create

    List<SourceRecord> apply(SourceTaskContext context, List<SourceRecord> records)
            throws InterruptedException {
        if (!configured) {
            configure(context.configs());
        }
        if (haltAt != 0) {
            return halt();
        }
        if (records == null || records.isEmpty()) {
            return records;
        }
        List<SourceRecord> batch = haltFile == null ? records : cutForHalt(records);
        List<SourceRecord> out = new ArrayList<>(batch.size());
        for (int i = 0; i < batch.size(); i++) {
            SourceRecord record = batch.get(i);
            SourceRecord next = i + 1 < batch.size() ? batch.get(i + 1) : null;
            Map<String, ?> partition = record.sourcePartition();
            if (!partial(record, next)) {
                complete.put(partition, record.sourceOffset());
                out.add(record);
                continue;
            }
            Map<String, ?> before = enabled ? previous(context, partition) : null;
            out.add(before == null ? record : withOffset(record, before));
        }
        return out;
    }

    private void configure(Map<String, String> config) {
        configured = true;
        enabled = !"false".equalsIgnoreCase(config.getOrDefault(ENABLED, "true"));
        tombstones = !"false".equalsIgnoreCase(config.getOrDefault("tombstones.on.delete", "true"));
        String halt = config.get(HALT_FILE);
        haltFile = halt == null || halt.isBlank() ? null : Path.of(halt);
    }

    /** Whether a later record of the same source event follows ``record``. */
    private boolean partial(SourceRecord record, SourceRecord next) {
        String op = op(record);
        boolean partial;
        if ("d".equals(op) && record.headers().lastWithName(NEW_KEY) != null) {
            moving = true;
            partial = true;
        } else if (record.headers().lastWithName(OLD_KEY) != null) {
            moving = false;
            partial = false;
        } else if (record.value() == null) {
            partial = moving;
        } else if ("d".equals(op)) {
            partial = tombstones;
        } else {
            partial = isBegin(record);
        }
        return partial
                || next != null
                        && Objects.equals(record.sourcePartition(), next.sourcePartition())
                        && Objects.equals(record.sourceOffset(), next.sourceOffset());
    }

    private Map<String, ?> previous(SourceTaskContext context, Map<String, ?> partition) {
        Map<String, ?> known = complete.get(partition);
        if (known == null && looked.putIfAbsent(partition, Boolean.TRUE) == null) {
            known = context.offsetStorageReader().offset(partition);
            if (known != null) {
                complete.put(partition, known);
            }
        }
        return known;
    }

    private static SourceRecord withOffset(SourceRecord r, Map<String, ?> offset) {
        return new SourceRecord(
                r.sourcePartition(),
                offset,
                r.topic(),
                r.kafkaPartition(),
                r.keySchema(),
                r.key(),
                r.valueSchema(),
                r.value(),
                r.timestamp(),
                r.headers());
    }

    private static String op(SourceRecord record) {
        Struct value = struct(record);
        if (value == null || value.schema().field("op") == null) {
            return null;
        }
        return value.getString("op");
    }

    private static boolean isBegin(SourceRecord record) {
        Struct value = struct(record);
        if (value == null) {
            return false;
        }
        Schema schema = value.schema();
        Field status = schema.field("status");
        return status != null
                && schema.field("event_count") != null
                && "BEGIN".equals(value.get(status));
    }

    private static Struct struct(SourceRecord record) {
        Object value = record.value();
        return value instanceof Struct s && s.schema().type() == Schema.Type.STRUCT ? s : null;
    }

    private List<SourceRecord> cutForHalt(List<SourceRecord> records) {
        if (!Files.exists(haltFile)) {
            return records;
        }
        for (int i = 0; i < records.size(); i++) {
            SourceRecord r = records.get(i);
            if ("d".equals(op(r)) && r.headers().lastWithName(NEW_KEY) != null) {
                haltAt = System.currentTimeMillis() + HALT_DELAY_MS;
                return new ArrayList<>(records.subList(0, i + 1));
            }
        }
        return records;
    }

    /**
     * Sends nothing more (what Debezium hands over now is lost, as in a crash) while Connect goes
     * on committing the offsets of what was sent, then removes the file and halts the JVM.
     */
    private List<SourceRecord> halt() throws InterruptedException {
        if (System.currentTimeMillis() < haltAt) {
            Thread.sleep(100);
            return List.of();
        }
        try {
            Files.deleteIfExists(haltFile);
        } catch (IOException e) {
            throw new IllegalStateException("cannot remove " + haltFile, e);
        }
        Runtime.getRuntime().halt(137);
        return List.of();
    }
}
