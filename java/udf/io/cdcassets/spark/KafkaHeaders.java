package io.cdcassets.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@code cdc_kafka_header(headers, name)}: the value (as text) of the first Kafka header named
 * {@code name}, or null; what {@code CAST(try_element_at(filter(headers, h -> h.key = name),
 * 1).value AS STRING)} gives, without a lambda (Spark does not generate code for one, so the
 * whole projection around it, the envelope reader included, ran outside the stage's generated
 * code and copied the reader's result into a row of its own).
 */
public final class KafkaHeaders {
  private KafkaHeaders() {}

  /** Headers are Spark's Kafka source's {@code array<struct<key:string,value:binary>>}. */
  public static UTF8String first(ArrayData headers, UTF8String name) {
    for (int i = 0; i < headers.numElements(); i++) {
      if (headers.isNullAt(i)) {
        continue;
      }
      InternalRow header = headers.getStruct(i, 2);
      if (!header.isNullAt(0) && header.getUTF8String(0).equals(name)) {
        return header.isNullAt(1) ? null : UTF8String.fromBytes(header.getBinary(1));
      }
    }
    return null;
  }
}
