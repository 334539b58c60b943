// Real consumers of Sluice's Debezium-format output, to check that they decode it
// (built and run through scripts/consumers.sh java).
//
//   java -cp CP ConsumerCheck connect <file>       schema'd Debezium values, one a line:
//       Kafka Connect's JsonConverter (schemas.enable=true) turns each into a Struct;
//       prints {"schema","op","after","before"} per line ("null" lines print null;
//       "after" and "before" are left out when the envelope has no such field)
//   java -cp CP ConsumerCheck connect-key <file>   schema'd keys, one a line:
//       prints {"schema","key"} per line, or null for a `null` line
//   java -cp CP ConsumerCheck flink <file> <row-type> [--ignore-parse-errors]
//       schemaless Debezium values (bare payload), one a line: Flink's debezium-json
//       deserializer turns each into RowData rows of the given row type (for example
//       "id INT NOT NULL, customer STRING, amount DECIMAL(10,2), placed TIMESTAMP_LTZ(3)");
//       prints {"kind":"+I"|"-U"|"+U"|"-D","row":[...]} per row
//
// Output goes to stdout as JSON lines. A line that does not decode is reported on
// stderr with its line number, and the exit status is 1.
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.lang.reflect.Proxy;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.formats.common.TimestampFormat;
import org.apache.flink.formats.json.debezium.DebeziumJsonDeserializationSchema;
import org.apache.flink.table.data.ArrayData;
import org.apache.flink.table.data.DecimalData;
import org.apache.flink.table.data.MapData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.LogicalTypeRoot;
import org.apache.flink.table.types.logical.MapType;
import org.apache.flink.table.types.logical.MultisetType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.utils.LogicalTypeParser;
import org.apache.flink.table.types.utils.TypeConversions;
import org.apache.flink.util.Collector;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;

public final class ConsumerCheck {
  private static final ObjectMapper JSON =
      new ObjectMapper().disable(SerializationFeature.FAIL_ON_EMPTY_BEANS);

  /** A line that a consumer refused. */
  private static final class Refused extends Exception {
    Refused(String message, Throwable cause) {
      super(message, cause);
    }
  }

  public static void main(String[] args) throws Exception {
    // Kafka logs its configuration at INFO; keep stderr for warnings and errors.
    if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
      System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    }
    if (args.length < 2) {
      usage();
    }
    String mode = args[0];
    Path file = Path.of(args[1]);
    try {
      switch (mode) {
        case "connect":
          if (args.length != 2) usage();
          connect(file, false);
          break;
        case "connect-key":
          if (args.length != 2) usage();
          connect(file, true);
          break;
        case "flink":
          if (args.length != 3 && !(args.length == 4 && args[3].equals("--ignore-parse-errors"))) {
            usage();
          }
          flink(file, args[2], args.length == 4);
          break;
        default:
          usage();
      }
    } catch (Refused e) {
      System.out.flush();
      System.err.println("ConsumerCheck: " + e.getMessage());
      for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
        System.err.println("  caused by " + c);
      }
      System.exit(1);
    }
    System.out.flush();
  }

  private static void usage() {
    System.err.println(
        "usage: ConsumerCheck connect <file> | connect-key <file>"
            + " | flink <file> <row-type> [--ignore-parse-errors]");
    System.exit(64);
  }

  private static List<String> lines(Path file) throws IOException {
    List<String> out = new ArrayList<>();
    for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
      if (!line.isBlank()) out.add(line);
    }
    return out;
  }

  private static void emit(Object value) throws IOException {
    System.out.println(JSON.writeValueAsString(value));
  }

  // ---- Kafka Connect -------------------------------------------------------

  private static void connect(Path file, boolean isKey) throws Exception {
    JsonConverter converter = new JsonConverter();
    converter.configure(Map.of("schemas.enable", "true"), isKey);
    int n = 0;
    for (String line : lines(file)) {
      n++;
      Map<String, Object> out;
      try {
        // A Kafka tombstone (or a keyless record's key) has no bytes at all; a
        // `null` line stands for it.
        byte[] bytes = line.strip().equals("null") ? null : line.getBytes(StandardCharsets.UTF_8);
        SchemaAndValue data = converter.toConnectData("t", bytes);
        if (data.value() == null) {
          emit(null);
          continue;
        }
        out = new LinkedHashMap<>();
        out.put("schema", data.schema() == null ? null : data.schema().name());
        if (isKey) {
          out.put("key", render(data.value()));
        } else {
          if (!(data.value() instanceof Struct)) {
            throw new IllegalArgumentException(
                "the value is a " + data.value().getClass().getName() + ", not a Struct");
          }
          Struct struct = (Struct) data.value();
          out.put("op", struct.getString("op"));
          // A row event has both; another envelope (a logical decoding message)
          // has neither, and then they are left out rather than shown as null.
          for (String name : List.of("after", "before")) {
            if (struct.schema().field(name) != null) out.put(name, render(struct.get(name)));
          }
        }
      } catch (Exception e) {
        throw new Refused(file + ":" + n + ": Kafka Connect's JsonConverter refused the line", e);
      }
      emit(out);
    }
  }

  /** A Connect value as plain Java values that Jackson writes as JSON. */
  private static Object render(Object value) {
    if (value == null) return null;
    if (value instanceof Struct) {
      Struct struct = (Struct) value;
      Map<String, Object> out = new LinkedHashMap<>();
      for (Field field : struct.schema().fields()) {
        out.put(field.name(), render(struct.get(field)));
      }
      return out;
    }
    if (value instanceof byte[]) return Base64.getEncoder().encodeToString((byte[]) value);
    if (value instanceof ByteBuffer) {
      ByteBuffer buffer = ((ByteBuffer) value).duplicate();
      byte[] bytes = new byte[buffer.remaining()];
      buffer.get(bytes);
      return Base64.getEncoder().encodeToString(bytes);
    }
    if (value instanceof BigDecimal) return ((BigDecimal) value).toPlainString();
    if (value instanceof java.util.Date) return ((java.util.Date) value).getTime();
    if (value instanceof List) {
      List<Object> out = new ArrayList<>();
      for (Object item : (List<?>) value) out.add(render(item));
      return out;
    }
    if (value instanceof Map) {
      Map<String, Object> out = new LinkedHashMap<>();
      for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
        out.put(String.valueOf(render(entry.getKey())), render(entry.getValue()));
      }
      return out;
    }
    return value; // Boolean, Byte, Short, Integer, Long, Float, Double, String
  }

  // ---- Flink debezium-json -------------------------------------------------

  private static void flink(Path file, String rowTypeText, boolean ignoreParseErrors)
      throws Exception {
    String text = rowTypeText.strip();
    if (!text.regionMatches(true, 0, "ROW<", 0, 4) && !text.regionMatches(true, 0, "ROW(", 0, 4)) {
      text = "ROW<" + text + ">";
    }
    LogicalType parsed = LogicalTypeParser.parse(text, ConsumerCheck.class.getClassLoader());
    if (!(parsed instanceof RowType)) {
      throw new IllegalArgumentException("not a row type: " + rowTypeText);
    }
    RowType rowType = (RowType) parsed;
    // What Flink's DebeziumJsonDecodingFormat builds for 'format' = 'debezium-json'
    // with no metadata columns, 'debezium-json.schema-include' = 'false' and
    // 'debezium-json.timestamp-format.standard' = 'ISO-8601'.
    DebeziumJsonDeserializationSchema schema =
        new DebeziumJsonDeserializationSchema(
            TypeConversions.fromLogicalToDataType(rowType),
            Collections.emptyList(),
            InternalTypeInfo.of(rowType),
            false,
            ignoreParseErrors,
            TimestampFormat.ISO_8601);
    schema.open(initializationContext());

    List<RowData.FieldGetter> getters = new ArrayList<>();
    for (int i = 0; i < rowType.getFieldCount(); i++) {
      getters.add(RowData.createFieldGetter(rowType.getTypeAt(i), i));
    }
    List<RowData> rows = new ArrayList<>();
    Collector<RowData> collector =
        new Collector<>() {
          @Override
          public void collect(RowData row) {
            rows.add(row);
          }

          @Override
          public void close() {}
        };
    int n = 0;
    for (String line : lines(file)) {
      n++;
      rows.clear();
      try {
        schema.deserialize(line.getBytes(StandardCharsets.UTF_8), collector);
      } catch (Exception e) {
        throw new Refused(file + ":" + n + ": Flink's debezium-json refused the line", e);
      }
      for (RowData row : rows) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("kind", row.getRowKind().shortString());
        List<Object> values = new ArrayList<>();
        for (int i = 0; i < getters.size(); i++) {
          values.add(renderFlink(getters.get(i).getFieldOrNull(row), rowType.getTypeAt(i)));
        }
        out.put("row", values);
        emit(out);
      }
    }
  }

  /** The deserializer ignores its context; one whose every method fails is enough. */
  private static DeserializationSchema.InitializationContext initializationContext() {
    return (DeserializationSchema.InitializationContext)
        Proxy.newProxyInstance(
            ConsumerCheck.class.getClassLoader(),
            new Class<?>[] {DeserializationSchema.InitializationContext.class},
            (proxy, method, args) -> {
              throw new UnsupportedOperationException(method.getName());
            });
  }

  /** A Flink internal value (RowData field) as a plain Java value for Jackson. */
  private static Object renderFlink(Object value, LogicalType type) {
    if (value == null) return null;
    LogicalTypeRoot root = type.getTypeRoot();
    switch (root) {
      case CHAR:
      case VARCHAR:
        return ((StringData) value).toString();
      case DECIMAL:
        return ((DecimalData) value).toBigDecimal().toPlainString();
      case BINARY:
      case VARBINARY:
        return Base64.getEncoder().encodeToString((byte[]) value);
      case DATE:
        return LocalDate.ofEpochDay((Integer) value).toString();
      case TIME_WITHOUT_TIME_ZONE:
        return LocalTime.ofNanoOfDay((Integer) value * 1_000_000L).toString();
      case TIMESTAMP_WITHOUT_TIME_ZONE:
        return ((TimestampData) value).toLocalDateTime().toString();
      case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
      case TIMESTAMP_WITH_TIME_ZONE:
        return ((TimestampData) value).toInstant().toString();
      case ARRAY:
        return renderArray((ArrayData) value, ((ArrayType) type).getElementType());
      case MULTISET:
        return renderMap((MapData) value, ((MultisetType) type).getElementType(), null);
      case MAP:
        return renderMap(
            (MapData) value, ((MapType) type).getKeyType(), ((MapType) type).getValueType());
      case ROW:
        {
          RowType rowType = (RowType) type;
          RowData row = (RowData) value;
          Map<String, Object> out = new LinkedHashMap<>();
          for (int i = 0; i < rowType.getFieldCount(); i++) {
            out.put(
                rowType.getFieldNames().get(i),
                renderFlink(
                    RowData.createFieldGetter(rowType.getTypeAt(i), i).getFieldOrNull(row),
                    rowType.getTypeAt(i)));
          }
          return out;
        }
      default:
        return value; // BOOLEAN, TINYINT, SMALLINT, INTEGER, BIGINT, FLOAT, DOUBLE
    }
  }

  private static List<Object> renderArray(ArrayData array, LogicalType elementType) {
    ArrayData.ElementGetter getter = ArrayData.createElementGetter(elementType);
    List<Object> out = new ArrayList<>();
    for (int i = 0; i < array.size(); i++) {
      out.add(renderFlink(getter.getElementOrNull(array, i), elementType));
    }
    return out;
  }

  /** A map as a JSON object (keys as their JSON text); a multiset maps to its counts. */
  private static Map<String, Object> renderMap(
      MapData map, LogicalType keyType, LogicalType valueType) {
    List<Object> keys = renderArray(map.keyArray(), keyType);
    List<Object> values =
        valueType == null
            ? renderArray(map.valueArray(), new org.apache.flink.table.types.logical.IntType())
            : renderArray(map.valueArray(), valueType);
    Map<String, Object> out = new LinkedHashMap<>();
    for (int i = 0; i < keys.size(); i++) {
      Object key = keys.get(i);
      out.put(key instanceof String ? (String) key : String.valueOf(key), values.get(i));
    }
    return out;
  }
}
