# The cronstream app image (API and stream workers) for docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY streams ./streams
COPY api ./api
COPY cli ./cli
COPY stack ./stack
COPY schemas ./schemas
COPY ops ./ops
# what `cronstream sink register` reads: the ledger's tables and trigger, the sinks' configs
COPY connectors/ledger.sql connectors/ledger-sink.json connectors/recipient-outcomes-sink.json ./connectors/
COPY connectors/ses-feedback-sink.json ./connectors/
RUN pip install --no-cache-dir -e .
ENV CRONSTREAM_HOME=/data
ENTRYPOINT ["cronstream"]
