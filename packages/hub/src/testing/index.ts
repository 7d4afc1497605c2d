export { startMockHub, sha256Hex, gitBlobId, type MockHub, type MockRepo, type MockFault, type MockRequest } from "./mock-hub.js";
