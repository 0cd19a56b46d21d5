// Serves telegram-test-api (an independent Bot API emulator) on 127.0.0.1:<port> and prints its URL.
// One gap is bridged here, in the open: the emulator's getMe answer lacks `is_bot`, a required field of
// the Bot API's User (aiogram refuses the answer without it), so getMe alone is answered in front of the
// emulator with the emulator's own fields plus is_bot: true. Every other request goes to the emulator.
const express = require('express');
const TelegramServer = require('telegram-test-api');

const port = Number(process.argv[2]);
const emulator = new TelegramServer({ port, host: '127.0.0.1', storeTimeout: 600 });
const front = express();
front.all('/bot:token/getMe', (_req, res) => {
  res.json({ ok: true, result: { id: 666, is_bot: true, first_name: 'Test First name', username: 'TestNameBot' } });
});
front.use(emulator.webServer);
const listening = front.listen(port, '127.0.0.1', () => console.log(`listening ${emulator.config.apiURL}`));
process.on('SIGTERM', () => listening.close(() => process.exit(0)));
