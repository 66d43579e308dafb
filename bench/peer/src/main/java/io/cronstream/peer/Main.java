package io.cronstream.peer;

import com.github.kagkarlsson.scheduler.Scheduler;
import com.github.kagkarlsson.scheduler.SchedulerClient;
import com.github.kagkarlsson.scheduler.SchedulerName;
import com.github.kagkarlsson.scheduler.task.TaskInstance;
import com.github.kagkarlsson.scheduler.task.helper.OneTimeTask;
import com.github.kagkarlsson.scheduler.task.helper.Tasks;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import javax.sql.DataSource;

/**
 * db-scheduler doing cronstream's spike, driven by {@code bench/peer.py}.
 *
 * <pre>
 * schedule --jdbc URL --prefix P [--jobs N --due-epoch-s S] [--idle M] [--fresh] [--batch 1000]
 *     creates db-scheduler's table if missing (TRUNCATEd with --fresh), then through
 *     SchedulerClient.scheduleBatch (db-scheduler's own JDBC batch insert, the rows its client
 *     writes) M idle one-time tasks due in 2100 and N due at epoch second S; checks that a row
 *     written by scheduleBatch equals one written by SchedulerClient.schedule; prints one JSON
 *     line of figures.
 * run --jdbc URL --name NAME --threads T --receiver URL [--pool T+4] [--polling-ms 1000]
 *     [--lower 1.0] [--upper 4.0] [--until-idle-after-epoch-s S]
 *     starts a scheduler (T threads, pollUsingLockAndFetch(lower, upper)) whose task POSTs to
 *     the receiver with X-Cronstream-Fire-Id (the task instance id) and X-Cronstream-Nominal-Time
 *     (its execution time) through java.net.http.HttpClient (HTTP/1.1, keep-alive); prints
 *     "ready", then runs until stdin closes (or a line "stop"), or, with --until-idle-after-epoch-s,
 *     until that second has passed and no due execution is left nor running; then stops and
 *     prints one JSON line: executions that POSTed fine, that failed, the process's CPU seconds.
 * </pre>
 */
public final class Main {

  static final String TASK_NAME = "webhook";
  static final Instant IDLE_AT = Instant.parse("2100-01-01T00:00:00Z");
  static final DateTimeFormatter SECONDS = DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss");

  private Main() {}

  public static void main(String[] args) throws Exception {
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    if (args.length == 0) {
      throw new IllegalArgumentException("usage: schedule|run --option value ...");
    }
    Map<String, String> opts = options(args);
    switch (args[0]) {
      case "schedule" -> schedule(opts);
      case "run" -> run(opts);
      default -> throw new IllegalArgumentException("unknown mode " + args[0]);
    }
  }

  static Map<String, String> options(String[] args) {
    Map<String, String> opts = new HashMap<>();
    for (int i = 1; i < args.length; i++) {
      if (!args[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --option, got " + args[i]);
      }
      String key = args[i].substring(2);
      if (i + 1 < args.length && !args[i + 1].startsWith("--")) {
        opts.put(key, args[++i]);
      } else {
        opts.put(key, "true");
      }
    }
    return opts;
  }

  static String required(Map<String, String> opts, String key) {
    return Objects.requireNonNull(opts.get(key), "--" + key + " is required");
  }

  static HikariDataSource pool(String jdbcUrl, int size, String name) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(jdbcUrl);
    config.setMaximumPoolSize(size);
    config.setMinimumIdle(size);
    config.setPoolName(name);
    return new HikariDataSource(config);
  }

  /** The one task definition; the execution handler is only called in a running scheduler. */
  static OneTimeTask<Void> webhookTask(Webhook webhook) {
    return Tasks.oneTime(TASK_NAME)
        .execute((instance, ctx) -> webhook.post(instance.getId(), ctx.getExecution().executionTime));
  }

  // -- schedule ---------------------------------------------------------------------------------

  static void schedule(Map<String, String> opts) throws Exception {
    String prefix = required(opts, "prefix");
    int jobs = Integer.parseInt(opts.getOrDefault("jobs", "0"));
    int idle = Integer.parseInt(opts.getOrDefault("idle", "0"));
    int batch = Integer.parseInt(opts.getOrDefault("batch", "1000"));
    Instant due = jobs > 0 ? Instant.ofEpochSecond(Long.parseLong(required(opts, "due-epoch-s"))) : null;
    // reWriteBatchedInserts: the driver sends scheduleBatch's JDBC batch as multi-row INSERTs
    String url = required(opts, "jdbc") + "&reWriteBatchedInserts=true";
    try (HikariDataSource ds = pool(url, 2, "peer-schedule")) {
      try (Connection c = ds.getConnection(); Statement s = c.createStatement()) {
        s.execute(resource("/scheduled_tasks.sql"));
        if (opts.containsKey("fresh")) {
          s.execute("TRUNCATE scheduled_tasks");
        }
      }
      OneTimeTask<Void> task = webhookTask(null);
      SchedulerClient client = SchedulerClient.Builder.create(ds, task).build();
      long started = System.nanoTime();
      insert(client, task, "idle-" + prefix + "-", idle, IDLE_AT, batch);
      double idleSeconds = (System.nanoTime() - started) / 1e9;
      started = System.nanoTime();
      if (jobs > 0) {
        insert(client, task, prefix + "-", jobs, due, batch);
      }
      double jobsSeconds = (System.nanoTime() - started) / 1e9;
      try (Connection c = ds.getConnection(); Statement s = c.createStatement()) {
        s.execute("ANALYZE scheduled_tasks");
      }
      String same = jobs > 0 ? String.valueOf(sameAsSchedule(ds, client, task, prefix)) : "null";
      System.out.printf(
          "{\"idle\": %d, \"idle_s\": %.3f, \"jobs\": %d, \"jobs_s\": %.3f, \"due_epoch_s\": %s, "
              + "\"rows_as_schedule_writes\": %s}%n",
          idle, idleSeconds, jobs, jobsSeconds,
          due == null ? "null" : String.valueOf(due.getEpochSecond()), same);
    }
  }

  static void insert(SchedulerClient client, OneTimeTask<Void> task, String idPrefix, int count,
      Instant at, int batch) {
    List<TaskInstance<?>> chunk = new ArrayList<>(batch);
    for (int i = 0; i < count; i++) {
      chunk.add(task.instance(String.format("%s%07d", idPrefix, i)));
      if (chunk.size() == batch || i == count - 1) {
        client.scheduleBatch(chunk, at);
        chunk.clear();
      }
    }
  }

  /**
   * Schedules one probe through SchedulerClient.schedule (one INSERT, what an application does
   * for a single task) and one through scheduleBatch, both due in 2100, and compares their
   * rows with the first spike row: every column but task_instance and execution_time must be
   * equal. The probes are deleted again.
   */
  static boolean sameAsSchedule(DataSource ds, SchedulerClient client, OneTimeTask<Void> task,
      String prefix) throws SQLException {
    String one = "probe-" + prefix + "-schedule";
    String batched = "probe-" + prefix + "-batch";
    client.schedule(task.instance(one), IDLE_AT);
    client.scheduleBatch(List.<TaskInstance<?>>of(task.instance(batched)), IDLE_AT);
    Map<String, Object> viaSchedule = row(ds, one);
    Map<String, Object> viaBatch = row(ds, batched);
    Map<String, Object> spikeRow = row(ds, String.format("%s-%07d", prefix, 0));
    try (Connection c = ds.getConnection();
        PreparedStatement p =
            c.prepareStatement("DELETE FROM scheduled_tasks WHERE task_instance IN (?, ?)")) {
      p.setString(1, one);
      p.setString(2, batched);
      p.executeUpdate();
    }
    spikeRow.remove("execution_time");
    Map<String, Object> scheduleWithoutTime = new HashMap<>(viaSchedule);
    scheduleWithoutTime.remove("execution_time");
    boolean same = viaSchedule.equals(viaBatch) && scheduleWithoutTime.equals(spikeRow);
    if (!same) {
      System.err.println("rows differ: schedule " + viaSchedule + ", scheduleBatch " + viaBatch
          + ", spike " + spikeRow);
    }
    return same;
  }

  static Map<String, Object> row(DataSource ds, String instance) throws SQLException {
    try (Connection c = ds.getConnection();
        PreparedStatement p =
            c.prepareStatement("SELECT * FROM scheduled_tasks WHERE task_instance = ?")) {
      p.setString(1, instance);
      try (ResultSet rs = p.executeQuery()) {
        if (!rs.next()) {
          throw new IllegalStateException("no row for " + instance);
        }
        ResultSetMetaData meta = rs.getMetaData();
        Map<String, Object> out = new HashMap<>();
        for (int i = 1; i <= meta.getColumnCount(); i++) {
          if (!meta.getColumnName(i).equals("task_instance")) {
            out.put(meta.getColumnName(i), String.valueOf(rs.getObject(i)));
          }
        }
        return out;
      }
    }
  }

  static String resource(String name) throws IOException {
    try (var in = Main.class.getResourceAsStream(name)) {
      return new String(Objects.requireNonNull(in, name).readAllBytes(), StandardCharsets.UTF_8);
    }
  }

  // -- run --------------------------------------------------------------------------------------

  /** The task's body: one POST to the receiver, as cronstream's webhook target makes it. */
  static final class Webhook {
    final HttpClient http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5))
            .build();
    final URI receiver;
    final AtomicLong ok = new AtomicLong();
    final AtomicLong failed = new AtomicLong();

    Webhook(URI receiver) {
      this.receiver = receiver;
    }

    void post(String fireId, Instant nominal) {
      HttpRequest request =
          HttpRequest.newBuilder(receiver)
              .timeout(Duration.ofSeconds(10))
              .header("X-Cronstream-Fire-Id", fireId)
              .header("X-Cronstream-Nominal-Time", pythonIsoformat(nominal))
              .POST(HttpRequest.BodyPublishers.noBody())
              .build();
      int status;
      try {
        status = http.send(request, HttpResponse.BodyHandlers.discarding()).statusCode();
      } catch (IOException e) {
        failed.incrementAndGet();
        throw new RuntimeException("POST " + receiver + ": " + e, e);
      } catch (InterruptedException e) {
        failed.incrementAndGet();
        Thread.currentThread().interrupt();
        throw new RuntimeException("interrupted", e);
      }
      if (status / 100 != 2) {
        failed.incrementAndGet();
        throw new RuntimeException("HTTP " + status); // db-scheduler retries a one-time task in 5 m
      }
      ok.incrementAndGet();
    }
  }

  /** Python's {@code datetime.isoformat()} of a UTC time, what cronstream sends. */
  static String pythonIsoformat(Instant t) {
    String base = LocalDateTime.ofInstant(t, ZoneOffset.UTC).format(SECONDS);
    int micros = t.getNano() / 1000;
    return base + (micros != 0 ? String.format(".%06d", micros) : "") + "+00:00";
  }

  static void run(Map<String, String> opts) throws Exception {
    int threads = Integer.parseInt(required(opts, "threads"));
    String name = required(opts, "name");
    Duration polling = Duration.ofMillis(Long.parseLong(opts.getOrDefault("polling-ms", "1000")));
    double lower = Double.parseDouble(opts.getOrDefault("lower", "1.0"));
    double upper = Double.parseDouble(opts.getOrDefault("upper", "4.0"));
    String untilIdle = opts.get("until-idle-after-epoch-s");
    Webhook webhook = new Webhook(URI.create(required(opts, "receiver")));
    // by default a connection for each execution thread, the poller, the heartbeats and the
    // housekeeper; an execution holds one only to complete (delete) its row, not during its POST
    int connections = Integer.parseInt(opts.getOrDefault("pool", String.valueOf(threads + 4)));
    HikariDataSource ds = pool(required(opts, "jdbc"), connections, "peer-" + name);
    Scheduler scheduler =
        Scheduler.create(ds, webhookTask(webhook))
            .threads(threads)
            .pollingInterval(polling)
            .pollUsingLockAndFetch(lower, upper)
            .schedulerName(new SchedulerName.Fixed(name))
            .build();
    scheduler.start();
    System.out.println("ready");
    System.out.flush();

    CountDownLatch stop = new CountDownLatch(1);
    Thread stdin =
        new Thread(
            () -> {
              try (BufferedReader in =
                  new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                  // only "stop" or the end of stdin ends the run
                }
              } catch (IOException e) {
                // stdin gone: stop
              }
              stop.countDown();
            },
            "stdin");
    stdin.setDaemon(true);
    stdin.start();
    while (!stop.await(500, TimeUnit.MILLISECONDS)) {
      if (untilIdle != null
          && Instant.now().getEpochSecond() > Long.parseLong(untilIdle)
          && scheduler.getCurrentlyExecuting().isEmpty()
          && dueLeft(ds) == 0) {
        break;
      }
    }
    scheduler.stop();
    double cpu =
        ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime()
            / 1e9;
    System.out.printf(
        "{\"name\": \"%s\", \"threads\": %d, \"ok\": %d, \"failed\": %d, \"cpu_s\": %.3f}%n",
        name, threads, webhook.ok.get(), webhook.failed.get(), cpu);
    System.out.flush();
    ds.close();
    System.exit(0);
  }

  static long dueLeft(DataSource ds) throws SQLException {
    try (Connection c = ds.getConnection();
        Statement s = c.createStatement();
        ResultSet rs =
            s.executeQuery("SELECT count(*) FROM scheduled_tasks WHERE execution_time <= now()")) {
      rs.next();
      return rs.getLong(1);
    }
  }
}
