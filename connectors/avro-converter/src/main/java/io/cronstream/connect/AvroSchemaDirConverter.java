package io.cronstream.connect;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema.Field;
import org.apache.avro.SchemaCompatibility;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Timestamp;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.storage.Converter;

/**
 * Reads cronstream records (Avro single-object encoding) into Connect Structs.
 *
 * <p>Why not Confluent's AvroConverter: it needs a schema registry that is not on Maven Central.
 * Our schemas live in the repository, so the writer schema is found by its 64-bit fingerprint in
 * the folder named by {@code schemas.dir}. A record whose fingerprint is unknown is a DataException
 * naming the topic, so the sink's error policy (not silence) decides what happens to it.
 * Tombstones (null values) pass through as null so compacted deletes reach the sink.
 *
 * <p>Older writer schemas live in {@code schemas/history/} ({@code <record>.<n>.avsc}), as for the
 * Python codec: a record written with one is read into the current schema of the same name (Avro
 * schema resolution: new fields take their defaults) and handed to Connect with the current
 * schema's Struct. Why: the ledger topic is compacted, not expired, so records written before a
 * schema changed stay in it; with {@code errors.tolerance=none} one of them would otherwise stop
 * the sink while Python still reads it. A history schema the current one cannot read is refused
 * when the converter is configured, not at the first old record.
 */
public class AvroSchemaDirConverter implements Converter {
    public static final String SCHEMAS_DIR_CONFIG = "schemas.dir";
    private static final byte MAGIC_0 = (byte) 0xC3;
    private static final byte MAGIC_1 = (byte) 0x01;

    /** How to read one writer schema: into itself (current) or into its current version. */
    private static final class Known {
        final org.apache.avro.Schema writer;
        final org.apache.avro.Schema reader;
        final GenericDatumReader<GenericRecord> datumReader;

        Known(org.apache.avro.Schema writer, org.apache.avro.Schema reader) {
            this.writer = writer;
            this.reader = reader;
            this.datumReader = new GenericDatumReader<>(writer, reader);
        }
    }

    private final Map<Long, Known> writers = new HashMap<>();
    // by reader schema: a record of an older version gets the very Struct schema a current one gets
    private final Map<org.apache.avro.Schema, Schema> connectSchemas = new IdentityHashMap<>();

    @Override
    public void configure(Map<String, ?> configs, boolean isKey) {
        Object dir = configs.get(SCHEMAS_DIR_CONFIG);
        if (dir == null) {
            throw new ConfigException(SCHEMAS_DIR_CONFIG, null, "the folder of .avsc files is required");
        }
        // One parser for all files, shared types (schemas/types/) first, so a topic schema may name
        // io.cronstream.Target the way the Python codec expands it.
        org.apache.avro.Schema.Parser parser = new org.apache.avro.Schema.Parser();
        Path root = Path.of(dir.toString());
        Map<String, org.apache.avro.Schema> current = new HashMap<>();
        try {
            List<Path> types = avscFiles(root.resolve("types"));
            for (Path file : types) {
                parser.parse(file.toFile());
            }
            for (Path file : avscFiles(root)) {
                org.apache.avro.Schema schema = parser.parse(file.toFile());
                writers.put(SchemaNormalization.parsingFingerprint64(schema), new Known(schema, schema));
                current.put(schema.getFullName(), schema);
            }
            for (Path file : avscFiles(root.resolve("history"))) {
                addHistory(file, current);
            }
        } catch (IOException | RuntimeException e) {
            throw new ConfigException(SCHEMAS_DIR_CONFIG, dir, "cannot read schemas: " + e.getMessage());
        }
        if (writers.isEmpty()) {
            throw new ConfigException(SCHEMAS_DIR_CONFIG, dir, "no .avsc files found");
        }
    }

    /**
     * An older version of a current schema: parsed on its own (it reuses the current record's name,
     * which one parser would refuse to define twice) and checked to be readable as the current
     * version before any record needs it. A history file is self-contained: the shared types it
     * uses are written inline as they were then (a shared type that changed, such as
     * io.cronstream.Target gaining the sms fields, would otherwise change every old version that
     * named it, and a parser given the shared types first would refuse the inline one as a
     * redefinition). tests/unit/runtime/test_codec.py holds every history file to this.
     */
    private void addHistory(Path file, Map<String, org.apache.avro.Schema> current) throws IOException {
        org.apache.avro.Schema old = new org.apache.avro.Schema.Parser().parse(file.toFile());
        org.apache.avro.Schema reader = current.get(old.getFullName());
        String where = "history/" + file.getFileName();
        if (reader == null) {
            throw new IllegalArgumentException(where + ": no current schema named " + old.getFullName());
        }
        SchemaCompatibility.SchemaPairCompatibility check =
                SchemaCompatibility.checkReaderWriterCompatibility(reader, old);
        if (check.getType() != SchemaCompatibility.SchemaCompatibilityType.COMPATIBLE) {
            throw new IllegalArgumentException(where + ": records written with it cannot be read as the current "
                    + old.getFullName() + ": " + check.getResult().getIncompatibilities());
        }
        // a history file identical (canonically) to the current schema adds nothing
        writers.putIfAbsent(SchemaNormalization.parsingFingerprint64(old), new Known(old, reader));
    }

    private static List<Path> avscFiles(Path folder) throws IOException {
        List<Path> out = new java.util.ArrayList<>();
        if (!Files.isDirectory(folder)) {
            return out;
        }
        try (DirectoryStream<Path> files = Files.newDirectoryStream(folder, "*.avsc")) {
            files.forEach(out::add);
        }
        java.util.Collections.sort(out);
        return out;
    }

    @Override
    public byte[] fromConnectData(String topic, Schema schema, Object value) {
        throw new DataException("cronstream topics are written by cronstream; this converter only reads");
    }

    @Override
    public SchemaAndValue toConnectData(String topic, byte[] value) {
        if (value == null) {
            return SchemaAndValue.NULL;
        }
        if (value.length < 10 || value[0] != MAGIC_0 || value[1] != MAGIC_1) {
            throw new DataException("topic " + topic + ": not an Avro single-object encoded record");
        }
        long fingerprint = ByteBuffer.wrap(value, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        Known known = writers.get(fingerprint);
        if (known == null) {
            throw new DataException("topic " + topic + ": unknown schema fingerprint " + Long.toHexString(fingerprint));
        }
        try {
            BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(value, 10, value.length - 10, null);
            GenericRecord record = known.datumReader.read(null, decoder);
            // converted on first use: a topic schema this sink never reads need not map to Connect
            Schema connectSchema = connectSchemas.computeIfAbsent(known.reader, r -> toConnect(r, false));
            return new SchemaAndValue(connectSchema, toConnectValue(connectSchema, record));
        } catch (IOException | RuntimeException e) {
            String version = known.writer == known.reader ? ""
                    : " (an older version, " + Long.toHexString(fingerprint) + ")";
            throw new DataException("topic " + topic + ": cannot decode " + known.writer.getFullName() + version
                    + ": " + e.getMessage(), e);
        }
    }

    /** Maps the Avro types our schemas use (records, primitives, nullable unions, timestamp-millis). */
    static Schema toConnect(org.apache.avro.Schema avro, boolean optional) {
        SchemaBuilder builder;
        switch (avro.getType()) {
            case RECORD:
                builder = SchemaBuilder.struct().name(avro.getFullName());
                for (Field field : avro.getFields()) {
                    builder.field(field.name(), toConnect(field.schema(), false));
                }
                break;
            case UNION:
                List<org.apache.avro.Schema> branches = avro.getTypes();
                if (branches.size() == 2 && branches.get(0).getType() == org.apache.avro.Schema.Type.NULL) {
                    return toConnect(branches.get(1), true);
                }
                throw new DataException("only [\"null\", T] unions are supported, got " + avro);
            case STRING:
            case ENUM:
                builder = SchemaBuilder.string();
                break;
            case INT:
                builder = SchemaBuilder.int32();
                break;
            case LONG:
                LogicalType logical = avro.getLogicalType();
                builder = logical instanceof LogicalTypes.TimestampMillis ? Timestamp.builder() : SchemaBuilder.int64();
                break;
            case BOOLEAN:
                builder = SchemaBuilder.bool();
                break;
            case DOUBLE:
                builder = SchemaBuilder.float64();
                break;
            case FLOAT:
                builder = SchemaBuilder.float32();
                break;
            case BYTES:
                builder = SchemaBuilder.bytes();
                break;
            case MAP:
                builder = SchemaBuilder.map(Schema.STRING_SCHEMA, toConnect(avro.getValueType(), false));
                break;
            case ARRAY:
                builder = SchemaBuilder.array(toConnect(avro.getElementType(), false));
                break;
            default:
                throw new DataException("unsupported Avro type " + avro.getType());
        }
        return optional ? builder.optional().build() : builder.build();
    }

    static Object toConnectValue(Schema schema, Object value) {
        if (value == null) {
            return null;
        }
        if (Timestamp.LOGICAL_NAME.equals(schema.name())) {
            return new java.util.Date((Long) value);
        }
        switch (schema.type()) {
            case STRUCT:
                GenericRecord record = (GenericRecord) value;
                Struct struct = new Struct(schema);
                for (org.apache.kafka.connect.data.Field field : schema.fields()) {
                    struct.put(field, toConnectValue(field.schema(), record.get(field.name())));
                }
                return struct;
            case STRING:
                return value.toString();
            case BYTES:
                return value instanceof ByteBuffer ? toArray((ByteBuffer) value) : value;
            case ARRAY:
                List<Object> items = new java.util.ArrayList<>();
                for (Object item : (java.util.Collection<?>) value) {
                    items.add(toConnectValue(schema.valueSchema(), item));
                }
                return items;
            case MAP:
                Map<String, Object> out = new HashMap<>();
                for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                    out.put(e.getKey().toString(), toConnectValue(schema.valueSchema(), e.getValue()));
                }
                return out;
            default:
                return value;
        }
    }

    private static byte[] toArray(ByteBuffer buffer) {
        byte[] bytes = new byte[buffer.remaining()];
        buffer.duplicate().get(bytes);
        return bytes;
    }
}
