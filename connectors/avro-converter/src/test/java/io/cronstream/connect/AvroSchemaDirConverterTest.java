package io.cronstream.connect;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Date;
import java.util.HexFormat;
import java.util.Map;

import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.errors.DataException;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The converter against the repository's own schemas/ folder (the pom passes its path as the
 * system property schemas.dir): what the ledger sink runs with, history included.
 */
class AvroSchemaDirConverterTest {
    private static final Path SCHEMAS = Path.of(System.getProperty("schemas.dir", "../../schemas"));
    private static final String TOPIC = "cronstream.ledger";

    private AvroSchemaDirConverter converter;

    @BeforeEach
    void configure() {
        converter = configured(SCHEMAS);
    }

    private static AvroSchemaDirConverter configured(Path dir) {
        AvroSchemaDirConverter c = new AvroSchemaDirConverter();
        c.configure(Map.of(AvroSchemaDirConverter.SCHEMAS_DIR_CONFIG, dir.toString()), false);
        return c;
    }

    /** A schema file parsed the way the converter parses it: after the shared types. */
    private static org.apache.avro.Schema parse(Path file) throws IOException {
        org.apache.avro.Schema.Parser parser = new org.apache.avro.Schema.Parser();
        try (var types = Files.newDirectoryStream(SCHEMAS.resolve("types"), "*.avsc")) {
            for (Path type : types) {
                parser.parse(type.toFile());
            }
        }
        return parser.parse(file.toFile());
    }

    /** Avro single-object encoding, as streams/runtime/codec.py writes every record. */
    private static byte[] singleObject(GenericRecord record) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(new byte[] {(byte) 0xC3, 0x01});
        long fingerprint = SchemaNormalization.parsingFingerprint64(record.getSchema());
        out.write(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(fingerprint).array());
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
        new GenericDatumWriter<GenericRecord>(record.getSchema()).write(record, encoder);
        encoder.flush();
        return out.toByteArray();
    }

    private static GenericRecord ledgerEntry(org.apache.avro.Schema schema, String recordId) {
        GenericRecord record = new GenericData.Record(schema);
        record.put("record_id", recordId);
        record.put("kind", "job");
        record.put("tenant", "acme");
        record.put("job_id", "j1");
        record.put("fire_id", recordId);
        record.put("nominal_time", 1_700_000_000_000L);
        record.put("decision", "fired");
        record.put("lateness_ms", 12L);
        record.put("epoch", 3);
        record.put("attempts", 1);
        record.put("outcome", "succeeded");
        record.put("status_code", 200);
        record.put("fired_at", 1_700_000_000_012L);
        record.put("completed_at", 1_700_000_000_050L);
        return record;
    }

    @Test
    void aLedgerRecordWrittenWithAnOlderSchemaIsReadIntoTheCurrentOne() throws IOException {
        org.apache.avro.Schema old = parse(SCHEMAS.resolve("history").resolve("ledger.1.avsc"));
        org.apache.avro.Schema now = parse(SCHEMAS.resolve("ledger.avsc"));
        assertNotEquals(SchemaNormalization.parsingFingerprint64(now), SchemaNormalization.parsingFingerprint64(old),
                "history/ledger.1.avsc must be another version");

        SchemaAndValue read = converter.toConnectData(TOPIC, singleObject(ledgerEntry(old, "j1@old")));
        Struct row = (Struct) read.value();
        assertEquals("j1@old", row.get("record_id"));
        assertEquals(new Date(1_700_000_000_000L), row.get("nominal_time"));
        assertEquals(200, row.get("status_code"));
        // the fields the old version lacks take the current schema's defaults
        assertNull(row.get("message_id"));
        assertNull(row.get("campaign_id"));
        assertNull(row.get("email"));

        // and the sink sees one schema for both versions: no column dropped or re-typed
        GenericRecord current = ledgerEntry(now, "j1@new");
        current.put("email", "a@example.com");
        SchemaAndValue fresh = converter.toConnectData(TOPIC, singleObject(current));
        assertSame(fresh.schema(), read.schema());
        assertEquals("a@example.com", ((Struct) fresh.value()).get("email"));
    }

    @Test
    void theBytesThePythonCodecWroteWithTheOlderSchemaAreRead() throws IOException {
        // tests/unit/test_codec.py checks that streams/runtime/codec.py writes exactly these bytes for
        // this record with schemas/history/ledger.1.avsc: the two sides agree on its fingerprint
        byte[] bytes;
        try (InputStream in = getClass().getResourceAsStream("/ledger-1-from-python.hex")) {
            bytes = HexFormat.of().parseHex(new String(in.readAllBytes(), StandardCharsets.US_ASCII).strip());
        }
        Struct row = (Struct) converter.toConnectData(TOPIC, bytes).value();
        assertEquals("j1@1", row.get("record_id"));
        assertEquals("succeeded", row.get("outcome"));
        assertEquals(new Date(1_700_000_000_050L), row.get("completed_at"));
        assertNull(row.get("email"));
    }

    @Test
    void anUnknownFingerprintIsADataExceptionNamingTheTopic() {
        byte[] bytes = {(byte) 0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0};
        DataException e = assertThrows(DataException.class, () -> converter.toConnectData(TOPIC, bytes));
        assertTrue(e.getMessage().contains(TOPIC), e.getMessage());
    }

    @Test
    void aTombstoneStaysNull() {
        assertSame(SchemaAndValue.NULL, converter.toConnectData(TOPIC, null));
    }

    private static void write(Path file, String json) throws IOException {
        Files.createDirectories(file.getParent());
        Files.writeString(file, json);
    }

    /** Version 1 of a record Thing. */
    private static final String THING_1 = """
            {"type": "record", "name": "Thing", "namespace": "io.cronstream",
             "fields": [{"name": "a", "type": "string"}]}""";
    /** Version 2 adds a field b, with whatever default is formatted in. */
    private static final String THING_2 = """
            {"type": "record", "name": "Thing", "namespace": "io.cronstream",
             "fields": [{"name": "a", "type": "string"}, {"name": "b", "type": "long"%s}]}""";

    @Test
    void aHistorySchemaTheCurrentOneCannotReadIsRefusedAtConfigure(@TempDir Path dir) throws IOException {
        write(dir.resolve("thing.avsc"), String.format(THING_2, "")); // b added with no default
        write(dir.resolve("history").resolve("thing.1.avsc"), THING_1);
        ConfigException e = assertThrows(ConfigException.class, () -> configured(dir));
        assertTrue(e.getMessage().contains("history/thing.1.avsc"), e.getMessage());

        write(dir.resolve("thing.avsc"), String.format(THING_2, ", \"default\": 7"));
        AvroSchemaDirConverter c = configured(dir);
        GenericRecord old = new GenericData.Record(new org.apache.avro.Schema.Parser().parse(THING_1));
        old.put("a", "x");
        Struct row = (Struct) c.toConnectData("t", singleObject(old)).value();
        assertEquals("x", row.get("a"));
        assertEquals(7L, row.get("b"));
    }

    @Test
    void aHistorySchemaWithNoCurrentVersionIsRefusedAtConfigure(@TempDir Path dir) throws IOException {
        write(dir.resolve("thing.avsc"), String.format(THING_2, ""));
        write(dir.resolve("history").resolve("gone.1.avsc"), THING_1.replace("Thing", "Gone"));
        ConfigException e = assertThrows(ConfigException.class, () -> configured(dir));
        assertTrue(e.getMessage().contains("io.cronstream.Gone"), e.getMessage());
    }
}
