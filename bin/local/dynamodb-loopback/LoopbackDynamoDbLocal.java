import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

/**
 * DynamoDB Local as its own main class starts it, but listening on loopback only. It has no option for the address:
 * its Jetty server is made with a port alone, which listens on every interface, so anyone who can reach the machine
 * could read and write the local host's accounts, keys, wallets and registry (any credentials pass with -sharedDb).
 * Before the server starts, its one connector is told the host. The command line is DynamoDB Local's own. Telemetry
 * is never set up here (its main class would, unless -disableTelemetry), so none is sent.
 */
public final class LoopbackDynamoDbLocal {
  public static void main(String[] args) throws Exception {
    DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
    Field field = DynamoDBProxyServer.class.getDeclaredField("server");
    field.setAccessible(true);
    Server server = (Server) field.get(proxy);
    Connector[] connectors = server.getConnectors();
    if (connectors.length == 0) throw new IllegalStateException("DynamoDB Local's server has no connector to bind");
    for (Connector connector : connectors) ((ServerConnector) connector).setHost("127.0.0.1");
    if (Boolean.getBoolean("svc.exitWithHost")) exitWithHost();
    proxy.start();
  }

  /**
   * Exits when the local host that started it is gone. The JVM runs in a process group of its own (a terminal's
   * Ctrl-C must not stop it before the host's orderly stop has settled the calls under way), and the host stops it
   * on its way out — which a host killed outright (kill -9, the OOM killer) never takes. Its standard input is a pipe
   * from the host, and the kernel closes that pipe when the host dies, however it dies.
   */
  private static void exitWithHost() {
    Thread watch =
        new Thread(
            () -> {
              try {
                while (System.in.read() != -1) {
                  // The host never writes: the read returns only at the pipe's end.
                }
              } catch (java.io.IOException e) {
                // A broken pipe is the host gone as well.
              }
              System.exit(0);
            },
            "exit-with-host");
    watch.setDaemon(true);
    watch.start();
  }
}
