// Starts fauxqs (installed next to this file by kale/fauxqs/__init__.py) on
// one address, 127.0.0.1 unless given. Usage: node serve.mjs PORT [HOST]
import { buildApp } from "fauxqs";
import { SqsStore } from "./node_modules/fauxqs/dist/sqs/sqsStore.js";
import { SnsStore } from "./node_modules/fauxqs/dist/sns/snsStore.js";
import { S3Store } from "./node_modules/fauxqs/dist/s3/s3Store.js";

const port = Number.parseInt(process.argv[2] ?? "", 10);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error(`serve.mjs: PORT must be 1..65535, got ${process.argv[2]}`);
  process.exit(2);
}
const stores = { sqsStore: new SqsStore(), snsStore: new SnsStore(), s3Store: new S3Store() };
const app = buildApp({ logger: false, stores });
await app.listen({ port, host: process.argv[3] ?? "127.0.0.1" });
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => app.close().then(() => process.exit(0)));
}
// Its parent (kale sqs-local, python -m bench.fauxqs) stops it on SIGTERM;
// should the parent die without doing so (SIGKILL), this process is handed to
// another parent, and ends too.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) app.close().then(() => process.exit(0));
}, 500).unref();
