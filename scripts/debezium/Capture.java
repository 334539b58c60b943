// Runs Debezium embedded with the given engine properties and prints each
// change record as one line of JSON on stdout, so tests can compare Sluice's
// Debezium-format output with Debezium's own. Built by scripts/debezium.sh.
//
//   java -Xmx768m -cp '<libs>/*:<capture.jar>' Capture <engine.properties>
//        [--max-records N] [--idle-ms M] [--timeout-ms T] [--headers simple|json]
//        [--set key=value]... [--seed-offset JSON [--seed-partition JSON]] [--avro]
//
// Each line is {"topic":..,"key":..,"value":..,"headers":{name:string}}:
// key and value are what Kafka's JsonConverter (schemas.enable=true) writes
// for them, spliced in byte for byte, or null where it writes no bytes (a
// tombstone's value, which has no schema). Header values are strings as Kafka Connect's default SimpleHeaderConverter writes
// them, or with --headers json as JsonConverter (schemas.enable=true) does.
// Properties named capture.converter.X are given to both JsonConverters as X
// (e.g. capture.converter.decimal.format=NUMERIC) and not to the engine.
//
// With --avro each line is instead {"topic":..,"key_schema":..,
// "value_schema":..,"key":..,"value":..,"headers":{..}}: the Avro schemas
// that Confluent's AvroConverter would register for the record's Kafka
// Connect key and value schemas, and the Avro data it would write, as
// AvroData.fromConnectSchema and fromConnectData make them (Apicurio's port
// of Confluent's AvroData, io.apicurio:apicurio-registry-utils-converter,
// with the converter's defaults: connect.meta.data on, enhanced Avro schema
// support off; capture.converter.X properties go to its AvroDataConfig too).
// A schema is Avro's Schema.toString() spliced in as JSON, null when the
// Connect schema is; a datum is Avro's JSON encoding of the value (unions
// as {"branch": value}, bytes as a string of chars U+0000-U+00FF), null
// when the value is. No registry is involved. AvroData is found by
// reflection, so this file compiles against a set without it (mariadb),
// where --avro fails at start.
//
// --seed-offset writes the file of offset.storage.file.filename (replacing
// it) with that one source offset before the engine starts, under the
// partition {"server": <topic.prefix>} unless --seed-partition gives another:
// e.g. {"file":"mariadb-bin.000002","pos":4,"gtids":"0-4242-17"} to start a
// binlog connector at a known place (with snapshot.mode=recovery).
//
// It stops, closing the engine, after N records (exit 0), or once M ms pass
// without a record after at least one arrived (exit 0). After T ms (default
// 120000) it gives up with exit 2; when the engine fails it exits 1. All
// logging goes to stderr (slf4j-simple, WARN unless -Dorg.slf4j.simpleLogger.
// defaultLogLevel says otherwise; java.util.logging at WARNING), so stdout
// holds only the JSON lines.

import com.fasterxml.jackson.databind.ObjectMapper;
import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.ObjectOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.HeaderConverter;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

public final class Capture {
    static {
        // Before any logger exists: slf4j-simple to stderr, WARN by default.
        setDefault("org.slf4j.simpleLogger.logFile", "System.err");
        setDefault("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        setDefault("org.slf4j.simpleLogger.showDateTime", "true");
        // The binlog client logs through java.util.logging (to stderr): WARNING too.
        if (System.getProperty("java.util.logging.config.file") == null) {
            java.util.logging.Logger.getLogger("").setLevel(java.util.logging.Level.WARNING);
        }
    }

    private static void setDefault(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final String CONVERTER_PREFIX = "capture.converter.";

    private final PrintStream out =
            new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false, StandardCharsets.UTF_8);
    private final JsonConverter keyConverter = new JsonConverter();
    private final JsonConverter valueConverter = new JsonConverter();
    private final HeaderConverter headerConverter;
    private final AvroOracle avro;
    private final long maxRecords;

    private final Object lock = new Object();
    private long count;
    private long lastRecordNanos;
    private final AtomicBoolean stopping = new AtomicBoolean();
    private final CountDownLatch finished = new CountDownLatch(1);
    private volatile boolean engineOk = true;
    private volatile String engineMessage;
    private volatile Throwable engineError;

    private Capture(Map<String, String> converterConfig, boolean jsonHeaders, boolean avro, long maxRecords) {
        // schemas.enable defaults to true; capture.converter.schemas.enable
        // can turn it off (the schemaless form, as a benchmark measures).
        Map<String, Object> key = new HashMap<>(converterConfig);
        key.putIfAbsent("schemas.enable", "true");
        key.put("converter.type", "key");
        keyConverter.configure(key);
        Map<String, Object> value = new HashMap<>(converterConfig);
        value.putIfAbsent("schemas.enable", "true");
        value.put("converter.type", "value");
        valueConverter.configure(value);
        if (jsonHeaders) {
            JsonConverter json = new JsonConverter();
            Map<String, Object> header = new HashMap<>(converterConfig);
            header.put("schemas.enable", "true");
            header.put("converter.type", "header");
            json.configure(header);
            headerConverter = json;
        } else {
            SimpleHeaderConverter simple = new SimpleHeaderConverter();
            simple.configure(Map.of("converter.type", "header"));
            headerConverter = simple;
        }
        this.avro = avro ? new AvroOracle(converterConfig) : null;
        this.maxRecords = maxRecords;
    }

    private static void usage(String problem) {
        System.err.println("Capture: " + problem);
        System.err.println("usage: Capture <engine.properties> [--max-records N] [--idle-ms M]"
                + " [--timeout-ms T] [--headers simple|json] [--set key=value]..."
                + " [--seed-offset JSON [--seed-partition JSON]] [--avro]");
        System.exit(64);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || args[0].startsWith("--")) {
            usage("missing the engine properties file");
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        long maxRecords = Long.MAX_VALUE;
        long idleMs = 5000;
        long timeoutMs = 120_000;
        boolean jsonHeaders = false;
        boolean avro = false;
        String seedOffset = null;
        String seedPartition = null;
        for (int i = 1; i < args.length; i++) {
            String arg = args[i];
            if (arg.equals("--avro")) {
                avro = true;
                continue;
            }
            if (i + 1 >= args.length) {
                usage("missing the value of " + arg);
            }
            String val = args[++i];
            switch (arg) {
                case "--max-records": maxRecords = Long.parseLong(val); break;
                case "--idle-ms": idleMs = Long.parseLong(val); break;
                case "--timeout-ms": timeoutMs = Long.parseLong(val); break;
                case "--headers":
                    if (!val.equals("simple") && !val.equals("json")) {
                        usage("--headers takes simple or json");
                    }
                    jsonHeaders = val.equals("json");
                    break;
                case "--set": {
                    int eq = val.indexOf('=');
                    if (eq <= 0) {
                        usage("--set takes key=value");
                    }
                    props.setProperty(val.substring(0, eq), val.substring(eq + 1));
                    break;
                }
                case "--seed-offset": seedOffset = val; break;
                case "--seed-partition": seedPartition = val; break;
                default: usage("unknown option " + arg);
            }
        }
        if (maxRecords <= 0) {
            usage("--max-records must be positive");
        }
        Map<String, String> converterConfig = new HashMap<>();
        for (String name : props.stringPropertyNames()) {
            if (name.startsWith(CONVERTER_PREFIX)) {
                converterConfig.put(name.substring(CONVERTER_PREFIX.length()), props.getProperty(name));
                props.remove(name);
            }
        }
        props.putIfAbsent("name", "sluice-capture");
        if (seedOffset != null) {
            seed(props, seedPartition, seedOffset);
        } else if (seedPartition != null) {
            usage("--seed-partition needs --seed-offset");
        }
        System.exit(new Capture(converterConfig, jsonHeaders, avro, maxRecords).run(props, idleMs, timeoutMs));
    }

    // Writes one offset in the format of Kafka's FileOffsetBackingStore: a
    // serialized HashMap<byte[], byte[]> from the JSON of [engine name,
    // partition] to the JSON of the offset, as Debezium embedded keys them.
    @SuppressWarnings("unchecked")
    private static void seed(Properties props, String partitionJson, String offsetJson) throws Exception {
        String file = props.getProperty("offset.storage.file.filename");
        if (file == null || !"org.apache.kafka.connect.storage.FileOffsetBackingStore"
                .equals(props.getProperty("offset.storage"))) {
            usage("--seed-offset needs offset.storage=org.apache.kafka.connect.storage.FileOffsetBackingStore"
                    + " and offset.storage.file.filename");
        }
        Map<String, Object> partition;
        if (partitionJson != null) {
            partition = MAPPER.readValue(partitionJson, LinkedHashMap.class);
        } else {
            String prefix = props.getProperty("topic.prefix");
            if (prefix == null) {
                usage("--seed-offset needs topic.prefix or --seed-partition");
            }
            partition = new LinkedHashMap<>();
            partition.put("server", prefix);
        }
        Map<String, Object> offset = MAPPER.readValue(offsetJson, LinkedHashMap.class);
        JsonConverter converter = new JsonConverter();
        converter.configure(Map.of("schemas.enable", "false"), true);
        String name = props.getProperty("name");
        byte[] key = converter.fromConnectData(name, null, List.of(name, partition));
        byte[] value = converter.fromConnectData(name, null, offset);
        HashMap<byte[], byte[]> raw = new HashMap<>();
        raw.put(key, value);
        try (ObjectOutputStream os = new ObjectOutputStream(new FileOutputStream(file))) {
            os.writeObject(raw);
        }
    }

    private int run(Properties props, long idleMs, long timeoutMs) throws Exception {
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine =
                DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                        .using(props)
                        .using((success, message, error) -> {
                            engineOk = success;
                            engineMessage = message;
                            engineError = error;
                            finished.countDown();
                        })
                        .notifying(this::handleBatch)
                        .build();
        Thread runner = new Thread(engine, "debezium-engine");
        runner.setDaemon(true);
        runner.start();

        long start = System.nanoTime();
        String stopReason = null;
        int code = 0;
        while (stopReason == null) {
            if (finished.await(50, TimeUnit.MILLISECONDS)) {
                // The engine stopped by itself: that is a failure.
                reportEngine("the engine stopped before the capture was done");
                return 1;
            }
            long now = System.nanoTime();
            synchronized (lock) {
                if (count >= maxRecords) {
                    stopReason = "max records";
                } else if (count > 0 && now - lastRecordNanos >= TimeUnit.MILLISECONDS.toNanos(idleMs)) {
                    stopReason = "idle";
                } else if (now - start >= TimeUnit.MILLISECONDS.toNanos(timeoutMs)) {
                    stopReason = "timeout";
                    code = 2;
                }
            }
        }
        stopping.set(true);
        synchronized (lock) {
            out.flush();
        }
        if (code == 2) {
            System.err.println("Capture: timed out after " + timeoutMs + " ms with " + count + " record(s)");
        }
        engine.close();
        if (!finished.await(30, TimeUnit.SECONDS)) {
            System.err.println("Capture: the engine did not stop within 30 s of close");
            return code != 0 ? code : 1;
        }
        if (!engineOk && code == 0) {
            reportEngine("the engine failed while stopping");
            return 1;
        }
        return code;
    }

    private void reportEngine(String what) {
        System.err.println("Capture: " + what + (engineMessage == null ? "" : ": " + engineMessage));
        if (engineError != null) {
            engineError.printStackTrace(System.err);
        }
    }

    private void handleBatch(List<RecordChangeEvent<SourceRecord>> batch,
                             DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer)
            throws InterruptedException {
        for (RecordChangeEvent<SourceRecord> event : batch) {
            synchronized (lock) {
                if (stopping.get() || count >= maxRecords) {
                    break;
                }
                out.print(line(event.record()));
                out.print('\n');
                count++;
                lastRecordNanos = System.nanoTime();
            }
            committer.markProcessed(event);
        }
        // Once per batch, not per record: a benchmark of Debezium should
        // not pay for a flush Debezium itself would not make.
        synchronized (lock) {
            out.flush();
        }
        committer.markBatchFinished();
    }

    private String line(SourceRecord record) {
        String topic = record.topic();
        StringBuilder sb = new StringBuilder(512);
        sb.append("{\"topic\":").append(quote(topic));
        if (avro != null) {
            avro.append(sb, record);
            return headers(sb, record);
        }
        sb.append(",\"key\":").append(json(keyConverter.fromConnectData(topic, record.keySchema(), record.key())));
        // A null value under a schema (what ExtractNewRecordState's
        // tombstone mode and the outbox router give a NULL payload) is
        // converted as a Connect worker would; the converter gives null
        // bytes only with no schema either.
        sb.append(",\"value\":").append(json(valueConverter.fromConnectData(topic, record.valueSchema(), record.value())));
        return headers(sb, record);
    }

    // Appends the headers and closes the line.
    private String headers(StringBuilder sb, SourceRecord record) {
        String topic = record.topic();
        sb.append(",\"headers\":{");
        boolean first = true;
        for (Header header : record.headers()) {
            if (!first) {
                sb.append(',');
            }
            first = false;
            byte[] bytes = headerConverter.fromConnectHeader(topic, header.key(), header.schema(), header.value());
            sb.append(quote(header.key())).append(':')
                    .append(bytes == null ? "null" : quote(new String(bytes, StandardCharsets.UTF_8)));
        }
        sb.append("}}");
        return sb.toString();
    }

    // Kafka Connect to Avro as Confluent's AvroConverter does it, through
    // Apicurio's port of its AvroData, and Avro's JSON encoding of the data.
    // Everything is reached by reflection (see the top of the file).
    private static final class AvroOracle {
        private final Object avroData;
        private final Method fromConnectSchema;
        private final Method fromConnectData;
        private final Class<?> avroSchemaClass;
        private final Constructor<?> datumWriter;
        private final Method write;
        private final Object encoderFactory;
        private final Method jsonEncoder;
        private final Method flush;

        AvroOracle(Map<String, String> config) {
            try {
                ClassLoader loader = Capture.class.getClassLoader();
                Class<?> dataClass = Class.forName("io.apicurio.registry.utils.converter.avro.AvroData", true, loader);
                Class<?> configClass =
                        Class.forName("io.apicurio.registry.utils.converter.avro.AvroDataConfig", true, loader);
                avroSchemaClass = Class.forName("org.apache.avro.Schema", true, loader);
                Object dataConfig = configClass.getConstructor(Map.class).newInstance(new HashMap<>(config));
                avroData = dataClass.getConstructor(configClass).newInstance(dataConfig);
                fromConnectSchema = dataClass.getMethod("fromConnectSchema", Schema.class);
                fromConnectData = dataClass.getMethod("fromConnectData", Schema.class, Object.class);
                datumWriter = Class.forName("org.apache.avro.generic.GenericDatumWriter", true, loader)
                        .getConstructor(avroSchemaClass);
                Class<?> encoderClass = Class.forName("org.apache.avro.io.Encoder", true, loader);
                write = Class.forName("org.apache.avro.io.DatumWriter", true, loader)
                        .getMethod("write", Object.class, encoderClass);
                Class<?> factoryClass = Class.forName("org.apache.avro.io.EncoderFactory", true, loader);
                encoderFactory = factoryClass.getMethod("get").invoke(null);
                jsonEncoder = factoryClass.getMethod("jsonEncoder", avroSchemaClass, OutputStream.class);
                flush = encoderClass.getMethod("flush");
            } catch (ClassNotFoundException e) {
                usage("--avro needs Apicurio's AvroData on the classpath (the pg set has it): " + e.getMessage());
                throw new IllegalStateException(e);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("--avro: AvroData is not what Capture expects", e);
            }
        }

        // Appends "key_schema", "value_schema", "key" and "value".
        void append(StringBuilder sb, SourceRecord record) {
            Object keySchema = schema(record.keySchema(), record.key());
            Object valueSchema = schema(record.valueSchema(), record.value());
            sb.append(",\"key_schema\":").append(keySchema == null ? "null" : keySchema.toString());
            sb.append(",\"value_schema\":").append(valueSchema == null ? "null" : valueSchema.toString());
            sb.append(",\"key\":").append(datum(record.keySchema(), keySchema, record.key()));
            sb.append(",\"value\":").append(datum(record.valueSchema(), valueSchema, record.value()));
        }

        // AvroData.fromConnectSchema: null for no schema and no value; a
        // value without a schema would take AvroData's Anything schema.
        private Object schema(Schema schema, Object value) {
            return schema == null && value == null ? null : invoke(fromConnectSchema, avroData, schema);
        }

        // AvroData.fromConnectData, unwrapped from its NonRecordContainer
        // when not a record, written by Avro's JSON encoder.
        private String datum(Schema schema, Object avroSchema, Object value) {
            if (value == null) {
                return "null";
            }
            Object datum = invoke(fromConnectData, avroData, schema, value);
            if (datum != null && datum.getClass().getName().endsWith(".NonRecordContainer")) {
                try {
                    datum = datum.getClass().getMethod("getValue").invoke(datum);
                } catch (ReflectiveOperationException e) {
                    throw new IllegalStateException(e);
                }
            }
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(256);
            Object encoder = invoke(jsonEncoder, encoderFactory, avroSchema, bytes);
            Object writer;
            try {
                writer = datumWriter.newInstance(avroSchema);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
            invoke(write, writer, datum, encoder);
            invoke(flush, encoder);
            return new String(bytes.toByteArray(), StandardCharsets.UTF_8).trim();
        }

        private static Object invoke(Method method, Object target, Object... args) {
            try {
                return method.invoke(target, args);
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof RuntimeException) {
                    throw (RuntimeException) cause;
                }
                throw new IllegalStateException(cause);
            } catch (IllegalAccessException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    private static String json(byte[] bytes) {
        return bytes == null ? "null" : new String(bytes, StandardCharsets.UTF_8);
    }

    private static String quote(String s) {
        try {
            return MAPPER.writeValueAsString(s);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }
}
