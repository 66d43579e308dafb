package io.cronstream.connect;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema.Field;
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
 */
public class AvroSchemaDirConverter implements Converter {
    public static final String SCHEMAS_DIR_CONFIG = "schemas.dir";
    private static final byte MAGIC_0 = (byte) 0xC3;
    private static final byte MAGIC_1 = (byte) 0x01;

    private final Map<Long, org.apache.avro.Schema> writers = new HashMap<>();
    private final Map<Long, Schema> connectSchemas = new HashMap<>();

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
        try {
            for (Path file : avscFiles(root.resolve("types"))) {
                parser.parse(file.toFile());
            }
            for (Path file : avscFiles(root)) {
                org.apache.avro.Schema schema = parser.parse(file.toFile());
                long fingerprint = SchemaNormalization.parsingFingerprint64(schema);
                writers.put(fingerprint, schema);
            }
        } catch (IOException | RuntimeException e) {
            throw new ConfigException(SCHEMAS_DIR_CONFIG, dir, "cannot read schemas: " + e.getMessage());
        }
        if (writers.isEmpty()) {
            throw new ConfigException(SCHEMAS_DIR_CONFIG, dir, "no .avsc files found");
        }
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
        org.apache.avro.Schema writer = writers.get(fingerprint);
        if (writer == null) {
            throw new DataException("topic " + topic + ": unknown schema fingerprint " + Long.toHexString(fingerprint));
        }
        try {
            BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(value, 10, value.length - 10, null);
            GenericRecord record = new GenericDatumReader<GenericRecord>(writer).read(null, decoder);
            // converted on first use: a topic schema this sink never reads need not map to Connect
            Schema connectSchema = connectSchemas.computeIfAbsent(fingerprint, f -> toConnect(writer, false));
            return new SchemaAndValue(connectSchema, toConnectValue(connectSchema, record));
        } catch (IOException | RuntimeException e) {
            throw new DataException("topic " + topic + ": cannot decode record: " + e.getMessage(), e);
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
