# Slim, non-root image. Dependencies come from the hash-pinned lock (requirements/runtime.txt), so a
# build today and a build next month install the same files. The tokenizer file is part of the package
# (services/data), so nothing is downloaded at start-up.
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements/runtime.txt ./requirements/runtime.txt
RUN pip install --no-cache-dir --prefix=/install --require-hashes -r requirements/runtime.txt
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY services ./services
COPY prompts ./prompts
RUN pip install --no-cache-dir --prefix=/install --no-deps .

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY --from=build /install /usr/local
RUN useradd --create-home --uid 10001 bot
USER bot
WORKDIR /home/bot
EXPOSE 8080
ENTRYPOINT ["python", "-m", "bot"]
