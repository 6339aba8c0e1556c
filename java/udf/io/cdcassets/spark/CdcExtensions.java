package io.cdcassets.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.BinaryType$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import scala.Option;
import scala.Function1;
import scala.Tuple3;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The project's SQL functions ({@code cdc_debezium_envelope}, {@code cdc_kafka_header}) for every
 * session: {@code spark.sql.extensions} names this class (with the jar on {@code spark.jars}), as
 * it names Iceberg's. {@link #register} adds them to a session started without it.
 */
public final class CdcExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  /** {@code cdc_debezium_envelope(value BINARY, names ARRAY<STRING>)}: see {@link EnvelopeReader}. */
  public static final String ENVELOPE_NAME = "cdc_debezium_envelope";

  static final FunctionIdentifier ENVELOPE = FunctionIdentifier.apply(ENVELOPE_NAME);
  static final ExpressionInfo ENVELOPE_INFO =
      new ExpressionInfo(EnvelopeReader.class.getName(), ENVELOPE_NAME);

  private static final Seq<AbstractDataType> NO_TYPES =
      CollectionConverters.asScala(java.util.List.<AbstractDataType>of()).toList();

  private static final Seq<AbstractDataType> ENVELOPE_TYPES =
      CollectionConverters.asScala(
              java.util.List.<AbstractDataType>of(
                  BinaryType$.MODULE$, DataTypes.createArrayType(DataTypes.StringType)))
          .toList();

  static final Function1<Seq<Expression>, Expression> ENVELOPE_BUILDER =
      args -> {
        if (args.size() != 2) {
          throw new IllegalArgumentException(
              ENVELOPE_NAME
                  + " takes 2 arguments (a record value, the image's field names), got "
                  + args.size());
        }
        // Generated code calls EnvelopeReader.read with the value's bytes and takes its
        // InternalRow as the result. A null value (a tombstone) gives null without a call.
        return staticCall(EnvelopeReader.class, EnvelopeReader.TYPE, "read", args, ENVELOPE_TYPES);
      };

  /** {@code cdc_kafka_header(headers, name)}: see {@link KafkaHeaders}. */
  public static final String HEADER_NAME = "cdc_kafka_header";

  static final FunctionIdentifier HEADER = FunctionIdentifier.apply(HEADER_NAME);
  static final ExpressionInfo HEADER_INFO =
      new ExpressionInfo(KafkaHeaders.class.getName(), HEADER_NAME);

  static final Function1<Seq<Expression>, Expression> HEADER_BUILDER =
      args -> {
        if (args.size() != 2) {
          throw new IllegalArgumentException(
              HEADER_NAME + " takes 2 arguments (the headers, a name), got " + args.size());
        }
        // No input types: the headers' type is the Kafka source's, and a name is a string.
        return staticCall(KafkaHeaders.class, DataTypes.StringType, "first", args, NO_TYPES);
      };

  /**
   * Spark's own call of a static Java method on internal values, inside generated code: no
   * conversion of Java objects per row (a Java UDF's cost); null when an argument is null.
   */
  private static Expression staticCall(
      Class<?> owner,
      DataType type,
      String method,
      Seq<Expression> args,
      Seq<AbstractDataType> inputTypes) {
    return new StaticInvoke(owner, type, method, args, inputTypes, true, true, true, Option.empty());
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectFunction(new Tuple3<>(ENVELOPE, ENVELOPE_INFO, ENVELOPE_BUILDER));
    extensions.injectFunction(new Tuple3<>(HEADER, HEADER_INFO, HEADER_BUILDER));
    return BoxedUnit.UNIT;
  }

  /** Register the functions in a running session (one whose configuration lacks the class). */
  public static void register(SparkSession session) {
    session
        .sessionState()
        .functionRegistry()
        .registerFunction(ENVELOPE, ENVELOPE_INFO, ENVELOPE_BUILDER);
    session.sessionState().functionRegistry().registerFunction(HEADER, HEADER_INFO, HEADER_BUILDER);
  }
}
