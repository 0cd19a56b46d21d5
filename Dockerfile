# Slim, non-root image. The tokenizer file is part of the package (services/data), so nothing is
# downloaded at start-up.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY services ./services
COPY prompts ./prompts
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY --from=build /install /usr/local
RUN useradd --create-home --uid 10001 bot
USER bot
WORKDIR /home/bot
EXPOSE 8080
ENTRYPOINT ["python", "-m", "bot"]
