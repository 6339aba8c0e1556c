package io.cdcassets.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One pass over a Kafka record value: UTF-8 check, the Debezium envelope (with or without an
 * embedded schema) and the row image the event applies, as Spark's internal values (the result of
 * SQL function {@code cdc_debezium_envelope(value BINARY, names ARRAY<STRING>)}, see {@link
 * CdcExtensions}).
 *
 * <p>It gives what {@code is_valid_utf8}, {@code from_json} of the envelope with the images as
 * strings, and {@code from_json} of the image as {@code map<string,string>} give together, but
 * reads the bytes once: the images are cut out of the value as the source wrote them instead of
 * being written back out as JSON by the parser, and the image's values are taken as text (strings
 * unescaped, numbers, booleans, objects and arrays as their JSON text). Of the image it gives the
 * text of each field in {@code names}, in that order ({@code vals}: the spec's columns, so no map
 * is built and searched per column), and the names of the fields not in {@code names} ({@code
 * unknown}: fields the spec does not know yet). Values are built as
 * Spark's own UTF8String, mostly as slices of the record's bytes, so no text is decoded to a Java
 * string and encoded back (that round trip and Spark's conversion of a Java UDF's result were a
 * third of the function's time). The Python side lists the result's fields in
 * {@code cdc_assets.sql.decode}.
 *
 * <p>A value that is not a JSON object, or whose envelope fields have the wrong JSON type (a
 * string for ts_ms, say), gives {@code json_ok = false}, as a corrupt record of from_json would.
 */
public final class EnvelopeReader {
  private EnvelopeReader() {}

  // The JSON dialect of Spark's from_json defaults: single quotes and NaN/Infinity accepted.
  static final JsonFactory FACTORY =
      JsonFactory.builder()
          .enable(JsonReadFeature.ALLOW_SINGLE_QUOTES)
          .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
          .streamReadConstraints(
              StreamReadConstraints.builder()
                  .maxStringLength(Integer.MAX_VALUE)
                  .maxNumberLength(Integer.MAX_VALUE)
                  .build())
          .build();

  /** The result's type; cdc_assets.sql.decode.ENVELOPE_FIELDS names the same fields. */
  static final StructType TYPE =
      (StructType)
          DataType.fromDDL(
              "struct<value_utf8_ok:boolean,json_ok:boolean,op:string,ts_ms:bigint,"
                  + "source:struct<ts_ms:bigint,snapshot:string,db:string,schema:string,"
                  + "table:string,file:string,pos:bigint,row:bigint,gtid:string,lsn:bigint,"
                  + "txId:bigint>,ddl:string,tableChanges:string,status:string,id:string,"
                  + "databaseName:string,before:string,after:string,vals:array<string>,"
                  + "unknown:array<string>,txn_id:string,txn_order:bigint>");

  private static final int FIELDS = 16;
  private static final int SOURCE_FIELDS = 11;

  /** Input from_json would call a corrupt record; thrown without a stack trace. */
  private static final class Corrupt extends Exception {
    private static final long serialVersionUID = 1L;

    Corrupt() {
      super(null, null, false, false);
    }
  }

  private static final Corrupt CORRUPT = new Corrupt();

  /** A before/after value: a slice of the record (objects, arrays) or the scalar's text. */
  private static final class Image {
    String text;
    int start = -1;
    int end = -1;
  }

  private static final class Envelope {
    Image before;
    Image after;
    UTF8String op;
    UTF8String ddl;
    UTF8String tableChanges;
    UTF8String status;
    UTF8String id;
    UTF8String databaseName;
    Long tsMs;
    InternalRow source;
    UTF8String txnId; // transaction.id (provide.transaction.metadata)
    Long txnOrder; // transaction.data_collection_order: 1..n per table within the transaction
  }

  /** The names asked for, read once per distinct array (a literal: the same one every row). */
  private static final class Names {
    final ArrayData source;
    final UTF8String[] names;

    Names(ArrayData source) {
      this.source = source;
      this.names = new UTF8String[source.numElements()];
      for (int i = 0; i < names.length; i++) {
        names[i] = source.getUTF8String(i);
      }
    }
  }

  // Per thread: each task deserializes its own copy of the literal, and two tasks running at
  // once would otherwise replace each other's entry on every row.
  private static final ThreadLocal<Names> LAST_NAMES = new ThreadLocal<>();

  private static UTF8String[] names(ArrayData source) {
    Names last = LAST_NAMES.get();
    if (last == null || last.source != source) {
      last = new Names(source);
      LAST_NAMES.set(last);
    }
    return last.names;
  }

  /** The envelope of a non-null record value, with the image's fields {@code names}. */
  public static InternalRow read(byte[] value, ArrayData names) {
    if (!Utf8.isValid(value)) {
      return failed(false);
    }
    Envelope top = new Envelope();
    Envelope payload = null;
    try (JsonParser p = FACTORY.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        throw CORRUPT;
      }
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String name = p.currentName();
        JsonToken t = p.nextToken();
        if (!name.equals("payload")) {
          envelopeField(p, top, name, t, value);
        } else if (t == JsonToken.START_OBJECT) {
          payload = new Envelope();
          while (p.nextToken() == JsonToken.FIELD_NAME) {
            String inner = p.currentName();
            envelopeField(p, payload, inner, p.nextToken(), value);
          }
        } else if (t == JsonToken.VALUE_NULL) {
          payload = null;
        } else {
          throw CORRUPT;
        }
      }
    } catch (Corrupt | IOException | RuntimeException e) {
      return failed(true);
    }
    // With an embedded schema the envelope is the "payload" object.
    Envelope e = payload != null ? payload : top;
    Image applied = e.op == OPS[2] || OPS[2].equals(e.op) ? e.before : e.after;
    Object[] f = new Object[FIELDS];
    f[0] = true;
    f[1] = true;
    f[2] = e.op;
    f[3] = e.tsMs;
    f[4] = e.source;
    f[5] = e.ddl;
    f[6] = e.tableChanges;
    f[7] = e.status;
    f[8] = e.id;
    f[9] = e.databaseName;
    f[10] = text(e.before, value);
    f[11] = text(e.after, value);
    f[14] = e.txnId;
    f[15] = e.txnOrder;
    if (applied != null) {
      ImageScanner.Fields fields = image(applied, value);
      if (fields != ImageScanner.NOT_OBJECT) {
        pick(fields, names(names), f);
      }
    }
    return new GenericInternalRow(f);
  }

  private static InternalRow failed(boolean utf8) {
    Object[] fields = new Object[FIELDS];
    fields[0] = utf8;
    fields[1] = false;
    return new GenericInternalRow(fields);
  }

  private static UTF8String text(Image image, byte[] value) {
    if (image == null) {
      return null;
    }
    return image.text != null ? UTF8String.fromString(image.text) : slice(value, image.start, image.end);
  }

  /** Bytes of a value already checked to be UTF-8: wrapped, not copied. */
  static UTF8String slice(byte[] value, int start, int end) {
    return UTF8String.fromBytes(value, start, end - start);
  }

  private static void envelopeField(
      JsonParser p, Envelope env, String name, JsonToken t, byte[] value)
      throws IOException, Corrupt {
    switch (name) {
      case "before" -> env.before = image(p, t);
      case "after" -> env.after = image(p, t);
      case "op" -> env.op = op(p, t, value);
      case "ts_ms" -> env.tsMs = bigint(p, t);
      case "source" -> env.source = source(p, t, value);
      case "ddl" -> env.ddl = string(p, t, value);
      case "tableChanges" -> env.tableChanges = string(p, t, value);
      case "status" -> env.status = string(p, t, value);
      case "id" -> env.id = string(p, t, value);
      case "databaseName" -> env.databaseName = string(p, t, value);
      case "transaction" -> transaction(p, t, value, env);
      default -> p.skipChildren(); // "schema" and the like are not read
    }
  }

  private static Image image(JsonParser p, JsonToken t) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    Image image = new Image();
    if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
      image.start = (int) p.currentTokenLocation().getByteOffset();
      p.skipChildren();
      image.end = (int) p.currentLocation().getByteOffset();
    } else {
      image.text = p.getText();
    }
    return image;
  }

  // c, u, d (OPS[2]: the op whose applied image is "before"), r, t, m.
  private static final UTF8String[] OPS = {
    UTF8String.fromString("c"),
    UTF8String.fromString("u"),
    UTF8String.fromString("d"),
    UTF8String.fromString("r"),
    UTF8String.fromString("t"),
    UTF8String.fromString("m"),
  };

  /** The op code: the usual one-letter codes are shared constants. */
  private static UTF8String op(JsonParser p, JsonToken t, byte[] value) throws IOException {
    if (t == JsonToken.VALUE_STRING && p.getTextLength() == 1) {
      char c = p.getTextCharacters()[p.getTextOffset()];
      for (UTF8String known : OPS) {
        if (known.getByte(0) == c) {
          return known;
        }
      }
    }
    return string(p, t, value);
  }

  /** A string field: a JSON string unescaped, any other value as its JSON text. */
  private static UTF8String string(JsonParser p, JsonToken t, byte[] value) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
      int start = (int) p.currentTokenLocation().getByteOffset();
      p.skipChildren();
      return slice(value, start, (int) p.currentLocation().getByteOffset());
    }
    return UTF8String.fromString(p.getText());
  }

  /** A bigint field: an integral JSON number within 64 bits, or null; anything else corrupt. */
  private static Long bigint(JsonParser p, JsonToken t) throws IOException, Corrupt {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t == JsonToken.VALUE_NUMBER_INT) {
      JsonParser.NumberType type = p.getNumberType();
      if (type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG) {
        return p.getLongValue();
      }
    }
    throw CORRUPT;
  }

  /** The id and the per-table order of the transaction block (null: not in a transaction). */
  private static void transaction(JsonParser p, JsonToken t, byte[] value, Envelope env)
      throws IOException, Corrupt {
    if (t == JsonToken.VALUE_NULL) {
      return;
    }
    if (t != JsonToken.START_OBJECT) {
      throw CORRUPT;
    }
    while (p.nextToken() == JsonToken.FIELD_NAME) {
      String name = p.currentName();
      JsonToken v = p.nextToken();
      switch (name) {
        case "id" -> env.txnId = string(p, v, value);
        case "data_collection_order" -> env.txnOrder = bigint(p, v);
        default -> p.skipChildren();
      }
    }
  }

  /** The fields of decode.SOURCE_STRUCT, in its order. */
  private static InternalRow source(JsonParser p, JsonToken t, byte[] value)
      throws IOException, Corrupt {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t != JsonToken.START_OBJECT) {
      throw CORRUPT;
    }
    Object[] f = new Object[SOURCE_FIELDS];
    while (p.nextToken() == JsonToken.FIELD_NAME) {
      String name = p.currentName();
      JsonToken v = p.nextToken();
      switch (name) {
        case "ts_ms" -> f[0] = bigint(p, v);
        case "snapshot" -> f[1] = string(p, v, value);
        case "db" -> f[2] = string(p, v, value);
        case "schema" -> f[3] = string(p, v, value);
        case "table" -> f[4] = string(p, v, value);
        case "file" -> f[5] = string(p, v, value);
        case "pos" -> f[6] = bigint(p, v);
        case "row" -> f[7] = bigint(p, v);
        case "gtid" -> f[8] = string(p, v, value);
        case "lsn" -> f[9] = bigint(p, v);
        case "txId" -> f[10] = bigint(p, v);
        default -> p.skipChildren();
      }
    }
    return new GenericInternalRow(f);
  }

  /**
   * The image's fields (as from_json into map<string,string> reads them); NOT_OBJECT when the
   * image is not a JSON object. A JSON string holding an object is parsed, as from_json would.
   */
  private static ImageScanner.Fields image(Image image, byte[] value) {
    if (image.start >= 0) {
      ImageScanner.Fields fast = ImageScanner.scan(value, image.start, image.end);
      if (fast != ImageScanner.UNSURE) {
        return fast;
      }
    }
    return ImageScanner.parse(image.text, value, image.start, image.end);
  }

  /**
   * {@code vals} (the text of each of {@code names}; the last of duplicated fields wins, as in a
   * map) and {@code unknown} (the other fields' names, each once, in image order) into {@code f}.
   */
  private static void pick(ImageScanner.Fields fields, UTF8String[] names, Object[] f) {
    Object[] vals = new Object[names.length];
    UTF8String[] unknown = null;
    int unknowns = 0;
    int next = 0; // sources write the columns in table order, mostly the spec's: try that first
    for (int j = 0; j < fields.n; j++) {
      UTF8String key = fields.keys[j];
      int at = -1;
      if (next < names.length && names[next].equals(key)) {
        at = next;
      } else {
        for (int i = 0; i < names.length; i++) {
          if (names[i].equals(key)) {
            at = i;
            break;
          }
        }
      }
      if (at >= 0) {
        vals[at] = fields.values[j];
        next = at + 1;
        continue;
      }
      if (unknown == null) {
        unknown = new UTF8String[4];
      }
      if (!contains(unknown, unknowns, key)) {
        if (unknowns == unknown.length) {
          unknown = java.util.Arrays.copyOf(unknown, 2 * unknowns);
        }
        unknown[unknowns++] = key;
      }
    }
    f[12] = new GenericArrayData(vals);
    Object[] extra = new Object[unknowns];
    if (unknowns > 0) {
      System.arraycopy(unknown, 0, extra, 0, unknowns);
    }
    f[13] = new GenericArrayData(extra);
  }

  private static boolean contains(UTF8String[] keys, int n, UTF8String key) {
    for (int i = 0; i < n; i++) {
      if (keys[i].equals(key)) {
        return true;
      }
    }
    return false;
  }
}
